"""Fewer upstream calls and a shorter tail, through the real
mitmdump + addon to simulated nodes that count every call per method: head
pinning + coalescing on a validator-like sync, identical concurrent calls,
the head a pinned read uses, and hedging a node that stalls."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from addon.chain.header_hash import header_hash
from common.endpoint_id import endpoint_id
from tests.e2e.harness import Stack, base_config
from tests.e2e.helpers import PROXY_DEFAULTS, call, next_client_ip, node_calls, post

pytestmark = pytest.mark.e2e

SYNC = [  # what a validator's metagraph sync sends after a new block, no block hash
    ("state_call", ["SubnetInfoRuntimeApi_get_subnets_info", "0x"]),
    ("state_call", ["NeuronInfoRuntimeApi_get_neurons_lite", "0x0100"]),
    ("state_getStorage", ["0x658faa385070e074c85bf6b568cf0555"]),
    ("state_getKeysPaged", ["0x658faa385070e074c85bf6b568cf0555", 100]),
    ("state_queryStorageAt", [["0x658faa385070e074c85bf6b568cf0555"]]),
    ("state_getRuntimeVersion", []),
]
READS = {m for m, _ in SYNC}
NOT_PROBED = {
    "state_call",
    "state_getKeysPaged",
    "state_queryStorageAt",
}  # methods the probes never send


def _build(tmp: Any) -> Stack:
    s = Stack(tmp)
    try:
        epoch = time.time() - 600
        s.start_nodes(("alpha", "beta"), epoch=epoch, block_time=12.0)
        config = base_config(
            tmp,
            s.nodes,
            top={"probe": {"interval_s": 30, "head_interval_s": 2, "timeout_s": 2}},
            **PROXY_DEFAULTS,
        )
        s.write_config(config)
        s.start_sidecar()
        s.start_proxy()
    except BaseException:
        s.stop()
        raise
    return s


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = _build(tmp_path_factory.mktemp("upstream-calls"))
    yield s
    s.stop()


@pytest.fixture
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack of its own: the hedge delay and budget start from nothing."""
    s = _build(tmp_path_factory.mktemp("hedge"))
    yield s
    s.stop()


def upstream_calls(stack: Stack, methods: set[str]) -> int:
    return sum(c for n in stack.nodes for m, c in n.state()["calls"].items() if m in methods)


async def _sync(stack: Stack, ip: str) -> list[Any]:
    head = await post(stack.rpc_url(), call("chain_getHeader"), client_ip=ip)
    out = [head]
    for i, (method, params) in enumerate(SYNC):
        out.append(await post(stack.rpc_url(), call(method, params, id_=i), client_ip=ip))
    return out


async def test_ten_validators_syncing_at_one_block_cost_one_upstream_call_per_read(
    stack: Stack,
) -> None:
    await post(stack.rpc_url(), call("chain_getHeader"))  # the proxy learns the head
    since = time.time()
    before = upstream_calls(stack, NOT_PROBED)
    results = await asyncio.gather(*(_sync(stack, next_client_ip()) for _ in range(10)))
    reads = upstream_calls(stack, NOT_PROBED) - before
    heads = node_calls(stack, "chain_getHeader", since)
    # the arrivals say which calls are the proxy's (User-Agent: chainproxy): the
    # reads no probe sends are all its, so a filter that missed them fails here
    # rather than letting ``heads`` count nothing
    assert sum(node_calls(stack, m, since) for m in NOT_PROBED) >= reads, reads
    client_calls = 10 * (len(SYNC) + 1)
    bad = [r.body for rs in results for r in rs if r.status != 200 or "result" not in r.body]
    assert not bad, bad[:3]
    pinned = {r.headers.get("X-Chainproxy-Pinned") for rs in results for r in rs[1:]}
    assert None not in pinned and len(pinned) <= 2  # every read pinned, one head (two at most)
    # one upstream call per distinct read per head, whatever the number of validators
    # (plus one per hedge: a read slower than the learned p95 raced on the other node)
    hedges = sum(1 for rs in results for r in rs if r.headers.get("X-Chainproxy-Hedged"))
    distinct = sum(1 for m, _ in SYNC if m in NOT_PROBED)
    assert reads <= distinct * len(pinned) + hedges, (reads, hedges)
    # the head itself is not cacheable; concurrent identical ones are shared:
    # at most one per client (the probes' own, more on a slow run, not counted)
    assert heads <= 10, heads
    assert reads + heads <= 0.3 * client_calls, (reads, heads)


async def test_thirty_identical_concurrent_calls_are_one_upstream_call(stack: Stack) -> None:
    await post(stack.rpc_url(), call("chain_getHeader"))
    # a runtime API no probe calls (the head probes read the runtime version now)
    read = ["SubnetInfoRuntimeApi_get_subnets_info", "0x"]
    before = upstream_calls(stack, {"state_call"})
    replies = await asyncio.gather(
        *(
            post(stack.rpc_url(), call("state_call", read, id_=i), client_ip=next_client_ip())
            for i in range(30)
        )
    )
    assert all(r.status == 200 for r in replies), [r.body for r in replies if r.status != 200]
    assert sorted(r.body["id"] for r in replies) == list(range(30))  # each its own id
    assert len({str(r.body["result"]) for r in replies}) == 1
    assert upstream_calls(stack, {"state_call"}) - before <= 2
    shared = [
        r
        for r in replies
        if r.headers.get("X-Chainproxy-Coalesced") or r.headers.get("X-Cache") == "HIT"
    ]
    assert len(shared) >= 28


async def test_uncacheable_calls_in_flight_are_shared_too(stack: Stack) -> None:
    for node in stack.nodes:
        node.control(latency_ms=300)  # long enough for all of them to be in flight at once
    try:
        before = upstream_calls(stack, {"system_health"})
        replies = await asyncio.gather(
            *(
                post(stack.rpc_url(), call("system_health", id_=i), client_ip=next_client_ip())
                for i in range(20)
            )
        )
        assert all(r.status == 200 and r.body["id"] == i for i, r in enumerate(replies))
        assert sum(1 for r in replies if r.headers.get("X-Chainproxy-Coalesced")) >= 15
        assert upstream_calls(stack, {"system_health"}) - before <= 4  # (+ a probe, maybe)
    finally:
        for node in stack.nodes:
            node.control(latency_ms=0)


async def test_a_pinned_read_is_never_older_than_the_head_a_client_was_shown(stack: Stack) -> None:
    ip = next_client_ip()
    for _ in range(3):
        shown = await post(stack.rpc_url(), call("chain_getHeader"), client_ip=ip)
        read = await post(stack.rpc_url(), call("state_getStorage", ["0x01"]), client_ip=ip)
        pinned = read.headers["X-Chainproxy-Pinned"]
        header = shown.body["result"]
        if pinned != header_hash(header):  # only a newer head may have come meanwhile
            newer = stack.nodes[0].rpc("chain_getHeader", [pinned])
            assert newer is not None and int(newer["number"], 16) > int(header["number"], 16)
        await asyncio.sleep(0.2)


async def test_a_stalling_node_is_hedged_and_no_client_waits_for_it(fresh: Stack) -> None:
    stack = fresh
    ip = next_client_ip()
    alpha, beta = stack.nodes
    # alpha the first choice: beta slower from the start (two equal nodes leave
    # the choice to whichever answered the warm-up a little faster, and a
    # proxy that prefers beta never meets alpha's stall, never hedges)
    beta.control(latency_ms=30)
    for i in range(40):  # good latencies: the hedge delay is learned (the 50 ms floor)
        r = await post(stack.rpc_url(), call("system_health", id_=i), client_ip=ip)
        assert r.status == 200
    alpha.control(stall_rate=1.0, stall_ms=1500)  # ... and now it stalls on every call
    try:
        replies = [
            await post(stack.rpc_url(), call("system_chain", id_=i), client_ip=next_client_ip())
            for i in range(6)
        ]
    finally:
        alpha.control(stall_rate=0.0)
        beta.control(latency_ms=0)
    assert all(r.status == 200 and r.body["result"] for r in replies)
    hedged = [r for r in replies if r.headers.get("X-Chainproxy-Hedged")]
    assert hedged, [dict(r.headers) for r in replies]
    assert all(r.headers["X-Chainproxy-Upstream"] == endpoint_id(beta.url) for r in hedged)


async def test_metadata_is_fetched_once_per_runtime_not_per_block(stack: Stack) -> None:
    node = stack.nodes[0]
    best = int(node.rpc("chain_getHeader")["result"]["number"], 16)
    hashes = [node.rpc("chain_getBlockHash", [best - k])["result"] for k in (1, 2, 3)]
    before = upstream_calls(stack, {"state_getMetadata"})
    replies = []
    for h in hashes:  # what clients do at each block: the version, then the metadata
        version = await post(stack.rpc_url(), call("state_getRuntimeVersion", [h]))
        assert version.status == 200 and version.body["result"]["specVersion"]
        replies.append(await post(stack.rpc_url(), call("state_getMetadata", [h])))
    assert all(r.status == 200 and r.body["result"].startswith("0x") for r in replies)
    assert len({r.body["result"] for r in replies}) == 1
    assert upstream_calls(stack, {"state_getMetadata"}) - before == 1  # one runtime, one fetch
    assert [r.headers["X-Cache"] for r in replies] == ["MISS", "HIT", "HIT"]
