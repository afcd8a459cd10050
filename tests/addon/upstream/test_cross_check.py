"""Cross-checked nodes: a sampled finalized answer is asked of a second node;
on a mismatch a third decides and the outvoted node is quarantined (and its
cached answer dropped), until it agrees again. In-process fake nodes."""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from typing import Any

from addon.rpc.jsonrpc import Call
from addon.upstream.cross_check import CrossChecker, Sample
from addon.upstream.pool import TIER_SYNCED, Upstream, UpstreamPool
from tests.fakes import FakeClock

BLOCK = "0x" + "ab" * 32
CALL = Call(1, "state_getStorage", ["0x01", BLOCK])


NULL = object()  # a node's answer ``null`` (None is an error)


class Nodes:
    """Each node answers the call with its own value (None: an error; ``NULL``: null)."""

    def __init__(self, values: dict[str, Any]) -> None:
        self.values = values
        self.asked: list[str] = []

    async def post(self, url: str, body: bytes, timeout: float) -> tuple[int, bytes]:
        name = url.split("//")[1]
        self.asked.append(name)
        doc = json.loads(body)
        value = self.values[name]
        if value is None:
            err = {"code": -32000, "message": "boom"}
            return 200, json.dumps({"jsonrpc": "2.0", "id": doc["id"], "error": err}).encode()
        result = None if value is NULL else value
        return 200, json.dumps({"jsonrpc": "2.0", "id": doc["id"], "result": result}).encode()


def _pool(*names: str) -> UpstreamPool:
    ups = [
        Upstream(id=n, url=f"http://{n}", provider="p", archive=False, tier=TIER_SYNCED)
        for n in names
    ]
    return UpstreamPool(
        ups, eject_after=3, eject_cooldown_s=30, clock=FakeClock(), rng=random.Random(1)
    )


class Run:
    def __init__(self, pool: UpstreamPool, nodes: Nodes) -> None:
        self.pool, self.nodes = pool, nodes
        self.outcomes: Counter[str] = Counter()
        self.forgotten: list[str] = []
        self.checker = CrossChecker(
            1.0, count=lambda net, o: self.outcomes.update([o]), timeout_s=1.0
        )

    async def check(self, answered_by: str, result: Any) -> None:
        sample = Sample("finney", CALL, answered_by, result, ("k1",))
        self.checker.submit(sample, self.pool, self.nodes, None, self.forgotten.extend)
        await asyncio.gather(*list(self.checker._tasks))


async def test_agreement_changes_nothing() -> None:
    run = Run(_pool("a", "b", "c"), Nodes({"a": "0x2a", "b": "0x2a", "c": "0x2a"}))
    await run.check("a", "0x2a")
    assert run.outcomes == {"agree": 1} and run.forgotten == []
    assert not any(u.quarantined for u in run.pool.upstreams.values())
    assert len(run.nodes.asked) == 1  # one extra call for a check that agrees


async def test_the_node_that_answered_the_client_wrongly_is_quarantined() -> None:
    run = Run(_pool("a", "b", "c"), Nodes({"a": "0xbad", "b": "0x2a", "c": "0x2a"}))
    await run.check("a", "0xbad")
    assert run.outcomes == {"mismatch": 1, "quarantined": 1}
    assert run.pool.upstreams["a"].quarantined
    assert run.forgotten == ["k1"]  # the client's answer is not kept in the cache
    assert all(run.pool.choose(set()).id != "a" for _ in range(50))  # type: ignore[union-attr]


async def test_a_second_node_that_is_outvoted_is_quarantined() -> None:
    run = Run(_pool("a", "b", "c"), Nodes({"a": "0x2a", "b": "0xbad", "c": "0x2a"}))
    for _ in range(10):  # until the coin sends the check to b
        await run.check("a", "0x2a")
        if run.pool.upstreams["b"].quarantined:
            break
    assert run.pool.upstreams["b"].quarantined and run.forgotten == []


async def test_no_majority_blames_nobody_and_keeps_nothing() -> None:
    run = Run(_pool("a", "b"), Nodes({"a": "0x2a", "b": "0xbad"}))
    await run.check("a", "0x2a")
    assert run.outcomes == {"mismatch": 1, "unresolved": 1}
    assert not any(u.quarantined for u in run.pool.upstreams.values())
    assert run.forgotten == ["k1"]


async def test_a_quarantined_node_is_admitted_once_it_agrees_again() -> None:
    nodes = Nodes({"a": "0xbad", "b": "0x2a", "c": "0x2a"})
    run = Run(_pool("a", "b", "c"), nodes)
    await run.check("a", "0xbad")
    assert run.pool.upstreams["a"].quarantined
    await run.check("b", "0x2a")  # still wrong: stays out
    assert run.pool.upstreams["a"].quarantined
    nodes.values["a"] = "0x2a"  # fixed
    run.checker._asked_at.clear()  # (re-asked at most every READMIT_EVERY_S)
    await run.check("b", "0x2a")
    assert not run.pool.upstreams["a"].quarantined and run.outcomes["readmitted"] == 1


async def test_an_error_or_no_node_left_is_a_skipped_check() -> None:
    run = Run(_pool("a", "b"), Nodes({"a": "0x2a", "b": None}))
    await run.check("a", "0x2a")
    assert run.outcomes == {"skipped": 1}
    run = Run(_pool("a"), Nodes({"a": "0x2a"}))
    await run.check("a", "0x2a")
    assert run.outcomes == {"skipped": 1}


async def test_the_last_node_is_never_quarantined() -> None:
    pool = _pool("a", "b")
    pool.upstreams["b"].quarantined = True
    assert not pool.quarantine(pool.upstreams["a"])


async def test_honest_nodes_are_never_quarantined_over_10000_samples() -> None:
    run = Run(_pool("a", "b", "c"), Nodes({"a": "0x2a", "b": "0x2a", "c": "0x2a"}))
    rng = random.Random(7)
    for _ in range(10_000):
        await run.check(rng.choice("abc"), "0x2a")
    assert run.outcomes == {"agree": 10_000}


def test_sampling_takes_about_the_rate() -> None:
    checker = CrossChecker(0.01, count=lambda n, o: None, timeout_s=1, rng=random.Random(3))
    assert 60 <= sum(checker.wanted() for _ in range(10_000)) <= 140
    assert not CrossChecker(0.0, count=lambda n, o: None, timeout_s=1).wanted()


class Purged(Run):
    """A run that notes which nodes' cache entries it was told to purge."""

    def __init__(self, pool: UpstreamPool, nodes: Nodes) -> None:
        super().__init__(pool, nodes)
        self.purged: list[str] = []

    async def check(self, answered_by: str, result: Any) -> None:
        sample = Sample("finney", CALL, answered_by, result, ("k1",))
        forget, purge = self.forgotten.extend, self.purged.append
        self.checker.submit(sample, self.pool, self.nodes, None, forget, purge)
        await asyncio.gather(*list(self.checker._tasks))


async def test_every_entry_of_a_quarantined_node_is_purged_once() -> None:
    run = Purged(_pool("a", "b", "c"), Nodes({"a": "0xbad", "b": "0x2a", "c": "0x2a"}))
    await run.check("b", "0x2a")  # a honest answer: nothing purged
    await run.check("a", "0xbad")  # the liar answered the client
    assert run.pool.upstreams["a"].quarantined and run.purged == ["a"]
    await run.check("a", "0xbad")  # an answer of it still in flight then: already out
    assert run.purged == ["a"]
    run = Purged(_pool("a", "b", "c"), Nodes({"a": "0x2a", "b": "0xbad", "c": "0x2a"}))
    for _ in range(10):  # until the coin sends the check to the liar b
        await run.check("a", "0x2a")
        if run.purged:
            break
    assert run.purged == ["b"] and run.forgotten == []
    run = Purged(_pool("a", "b"), Nodes({"a": "0x2a", "b": "0xbad"}))
    await run.check("a", "0x2a")  # no majority: nobody blamed, nothing purged
    assert run.purged == [] and run.forgotten == ["k1"]


async def test_a_node_without_the_block_is_no_vote() -> None:
    """``null`` for a block (a node a block behind finality) says nothing of it:
    no one is quarantined for it, and a client's ``null`` is not checked; a
    ``null`` storage value is a value and is compared."""
    header = {"number": "0x5a"}
    for call, right in (
        (Call(1, "chain_getBlockHash", [90]), BLOCK),
        (Call(1, "chain_getBlockHash", [[89, 90]]), [BLOCK, BLOCK]),
        (Call(1, "chain_getHeader", [BLOCK]), header),
        (Call(1, "chain_getBlock", [BLOCK]), {"block": {"header": header}}),
    ):
        behind = [BLOCK, None] if isinstance(right, list) else None
        nodes = Nodes({"a": right, "b": NULL if behind is None else behind, "c": right})
        run = Run(_pool("a", "b", "c"), nodes)
        for _ in range(10):  # the second node asked is b, the one behind, at times
            sample = Sample("finney", call, "a", right, ("k1",))
            run.checker.submit(sample, run.pool, nodes, None, run.forgotten.extend)
            await asyncio.gather(*list(run.checker._tasks))
        assert "b" in nodes.asked and run.outcomes["mismatch"] == 0, call
        assert not any(u.quarantined for u in run.pool.upstreams.values())
        asked = len(nodes.asked)
        run.checker.submit(Sample("finney", call, "b", behind, ()), run.pool, nodes, None, print)
        await asyncio.gather(*list(run.checker._tasks))
        assert len(nodes.asked) == asked  # the client's null: not checked
    nodes = Nodes({"a": "0x2a", "b": NULL, "c": "0x2a"})  # storage: null is a value
    run = Run(_pool("a", "b", "c"), nodes)
    for _ in range(10):  # until the coin sends the check to b
        await run.check("a", "0x2a")
        if run.pool.upstreams["b"].quarantined:
            break
    assert run.pool.upstreams["b"].quarantined


async def test_a_check_asks_only_nodes_that_may_hold_the_blocks_state() -> None:
    """A pruned node measured to lack the block is never the second (nor the
    third) node of a check: it would answer "discarded", not the block's value."""
    pool = _pool("a", "pruned", "b")
    pool.upstreams["pruned"].horizon_lost = 5_000  # it lacks every block up to 5000
    nodes = Nodes({"a": "0x2a", "pruned": None, "b": "0x2a"})
    run = Run(pool, nodes)
    for _ in range(10):
        sample = Sample("finney", CALL, "a", "0x2a", ("k1",), state_block=4_000)
        run.checker.submit(sample, pool, nodes, None, run.forgotten.extend)
        await asyncio.gather(*list(run.checker._tasks))
    assert nodes.asked == ["b"] * 10 and run.outcomes == {"agree": 10}
