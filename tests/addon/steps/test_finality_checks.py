"""Reads at a block hash the proxy never saw are cross-checked once it knows
the hash is final: the first sampled read is answered as any read and its
check decided when the look-up (chainproxy's own chain_getHeader, then
chain_getBlockHash at that height) ends; later reads need no look-up. The
pipeline with in-process fake nodes."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from addon.chain.finality import FINAL, NOT_FINAL
from addon.chain.header_hash import header_hash
from addon.hooks.internal_calls import InternalCalls
from addon.reporting.live_metrics import CROSS_CHECKS, FINALITY_LOOKUPS
from addon.runtime import Runtime
from tests.addon.helpers import A, B, cached_stages, call, fork_header, rpc_flow, run

FINALIZED = 100


def _block(n: int, fork: str = "a") -> tuple[str, dict[str, Any]]:
    header = fork_header(n, fork)
    h = header_hash(header)
    assert h is not None
    return h, header


class Chain:
    """What both fake nodes answer: headers by hash, canonical hashes by height,
    a storage value."""

    def __init__(self) -> None:
        self.headers: dict[str, dict[str, Any]] = {}
        self.canonical: dict[int, str] = {}

    def add(self, n: int, fork: str = "a") -> str:
        h, header = _block(n, fork)
        self.headers[h] = header
        if fork == "a":
            self.canonical[n] = h
        return h

    def answer(self, doc: dict[str, Any]) -> tuple[int, bytes]:
        method, params = doc["method"], doc["params"]
        if method == "chain_getHeader":
            result: Any = self.headers.get(params[0])
        elif method == "chain_getBlockHash":
            result = self.canonical.get(params[0])
        else:
            result = "0x2a"
        return 200, json.dumps({"jsonrpc": "2.0", "id": doc["id"], "result": result}).encode()


def _stack() -> tuple[list[Any], Any, Runtime, Chain]:
    stages, fake, rt = cached_stages(cross_check={"sample_rate": 1.0})
    rt.legacy = InternalCalls(stages[0].holder)
    rt.chain.set_heights("finney", FINALIZED + 20, FINALIZED)
    chain = Chain()
    fake.behaviour = {A: chain.answer, B: chain.answer}
    return stages, fake, rt, chain


async def _settled(rt: Runtime) -> None:
    """Until the look-ups and checks in the background have ended."""
    checker = rt.cross_checker
    assert checker is not None
    for _ in range(1000):
        if not rt.finality._running and not checker._tasks:
            return
        await asyncio.sleep(0)
    raise AssertionError("look-ups or checks still running")


def _count(rt: Runtime, name: str, outcome: str) -> int:
    key = (name, (("network", "finney"), ("outcome", outcome)))
    return rt.metrics._extra.get(key, 0)


def _asked(fake: Any, method: str) -> list[str]:
    return [url for url, doc in fake.seen if isinstance(doc, dict) and doc["method"] == method]


async def test_a_read_at_a_finalized_hash_the_client_brought_is_checked() -> None:
    stages, fake, rt, chain = _stack()
    h = chain.add(90)
    f = await run(stages, rpc_flow(call("state_getStorage", ["0x26", h])))
    assert json.loads(f.response.content)["result"] == "0x2a"  # answered as any read
    await _settled(rt)
    assert rt.chain.blocks.get(h) == 90 and rt.chain.blocks.canonical(h) is True
    assert _count(rt, FINALITY_LOOKUPS, FINAL) == 1
    assert len(_asked(fake, "state_getStorage")) == 2  # the client's read, and its check
    assert _count(rt, CROSS_CHECKS, "agree") >= 1
    # the next read at the hash: checked at once, no look-up
    headers = len(_asked(fake, "chain_getHeader"))
    await run(stages, rpc_flow(call("state_getStorage", ["0x27", h])))
    await _settled(rt)
    assert len(_asked(fake, "state_getStorage")) == 4
    assert len(_asked(fake, "chain_getHeader")) == headers
    assert _count(rt, FINALITY_LOOKUPS, FINAL) == 1


async def test_reads_at_a_forks_block_or_above_finality_are_not_checked() -> None:
    stages, fake, rt, chain = _stack()
    fork = chain.add(90, "b")
    chain.add(90)
    head = chain.add(FINALIZED + 5)
    for h in (fork, head):
        await run(stages, rpc_flow(call("state_getStorage", ["0x26", h])))
        await _settled(rt)
    assert _count(rt, FINALITY_LOOKUPS, NOT_FINAL) == 2
    assert rt.chain.blocks.get(head) == FINALIZED + 5
    assert len(_asked(fake, "state_getStorage")) == 2  # the reads only: no check
    canonical_asked = len(_asked(fake, "chain_getBlockHash"))
    await run(stages, rpc_flow(call("state_getStorage", ["0x27", fork])))
    await _settled(rt)
    assert _count(rt, FINALITY_LOOKUPS, NOT_FINAL) == 3  # asked again: from the cache
    assert len(_asked(fake, "chain_getBlockHash")) == canonical_asked
    assert len(_asked(fake, "state_getStorage")) == 3


async def test_a_hash_no_node_knows_is_answered_as_before() -> None:
    stages, fake, rt, _ = _stack()
    h, _ = _block(90)  # no node has its header
    f = await run(stages, rpc_flow(call("state_getStorage", ["0x26", h])))
    assert f.response.status_code == 200
    assert json.loads(f.response.content)["result"] == "0x2a"
    await _settled(rt)
    assert rt.chain.blocks.get(h) is None
    assert len(_asked(fake, "state_getStorage")) == 1


async def test_a_finalized_heights_block_hash_is_checked() -> None:
    stages, fake, rt, chain = _stack()
    chain.add(90)
    chain.add(FINALIZED + 1)
    await run(stages, rpc_flow(call("chain_getBlockHash", [90])))
    await _settled(rt)
    assert len(_asked(fake, "chain_getBlockHash")) == 2  # the client's, and its check
    await run(stages, rpc_flow(call("chain_getBlockHash", [FINALIZED + 1])))
    await _settled(rt)
    assert len(_asked(fake, "chain_getBlockHash")) == 3  # above finality: never checked


async def test_the_check_of_a_looked_up_hash_asks_no_node_without_its_state() -> None:
    """The block's height is learned by the look-up, after the read: the check
    then goes only to nodes whose horizon may hold it (here none: skipped),
    never to a pruned node that would answer "discarded" instead of a value."""
    stages, fake, rt, chain = _stack()
    pruned = next(u for u in rt.pools["finney"].upstreams.values() if u.provider == "beta")
    pruned.horizon_lost = 95  # measured: no state at or below block 95

    def discarded(doc: dict[str, Any]) -> tuple[int, bytes]:
        if doc["method"] != "state_getStorage":
            return chain.answer(doc)
        err = {"code": 4003, "message": "State already discarded for " + doc["params"][1]}
        return 200, json.dumps({"jsonrpc": "2.0", "id": doc["id"], "error": err}).encode()

    fake.behaviour[B] = discarded
    h = chain.add(90)
    f = await run(stages, rpc_flow(call("state_getStorage", ["0x26", h])))
    assert json.loads(f.response.content)["result"] == "0x2a"  # A's answer, whoever was first
    asked_b = [u for u in _asked(fake, "state_getStorage") if u == B]
    await _settled(rt)
    assert rt.chain.blocks.get(h) == 90 and _count(rt, FINALITY_LOOKUPS, FINAL) == 1
    assert [u for u in _asked(fake, "state_getStorage") if u == B] == asked_b
    assert _count(rt, CROSS_CHECKS, "skipped") == 1


async def test_with_one_node_a_sampled_read_costs_no_look_up() -> None:
    # nothing to check the node against: the check is skipped before the
    # finality look-up, whose chain_getHeader would be one more upstream call
    stages, fake, rt, chain = _stack()
    pool = rt.pools["finney"]
    for eid in list(pool.upstreams)[1:]:
        del pool.upstreams[eid]
    assert len(pool.upstreams) == 1
    h = chain.add(90)
    f = await run(stages, rpc_flow(call("state_getStorage", ["0x26", h])))
    assert json.loads(f.response.content)["result"] == "0x2a"
    await _settled(rt)
    assert _asked(fake, "chain_getHeader") == [] and _asked(fake, "chain_getBlockHash") == []
    assert len(_asked(fake, "state_getStorage")) == 1
    assert _count(rt, CROSS_CHECKS, "skipped") == 1
    assert _count(rt, FINALITY_LOOKUPS, FINAL) == 0
