"""Health- and block-height-aware routing end to end: the sidecar probes real
simulated nodes, publishes the snapshot, and the addon's choices follow it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from common.endpoint_id import endpoint_id
from tests.e2e.harness import Node, Stack, http_json
from tests.e2e.helpers import build_stack, call, next_client_ip, post

pytestmark = pytest.mark.e2e

FAST_PROBES = {
    "probe": {
        "interval_s": 1,
        "head_interval_s": 0.5,
        "timeout_s": 1,
        "fail_threshold": 2,
        "recover_threshold": 2,
    },
    "networks": {"finney": {"max_lag_blocks": 3}},
}
# A method the probes never call, so node counters show proxy traffic only.
METHOD = "system_properties"


@pytest.fixture(scope="module")
def rstack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # Routing itself is measured here (calls per node): identical calls sprayed at
    # once must each go upstream, so sharing and hedging are off for this stack.
    s = build_stack(
        tmp_path_factory.mktemp("routing"),
        ("alpha", "beta", "archive-gamma"),
        top=FAST_PROBES,
        coalesce={"enabled": False},
        hedge={"enabled": False},
    )
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def _reset(rstack: Stack) -> Iterator[None]:
    yield
    for n in rstack.nodes:
        if n.proc.alive():
            n.reset()


def snapshot(stack: Stack) -> dict[str, Any]:
    return http_json(f"{stack.sidecar_url}/api/v1/internal/routes/finney")


def wait_for(stack: Stack, node: Node, pred: Any, timeout: float = 20.0) -> dict[str, Any]:
    """Wait until the sidecar's view of ``node`` satisfies ``pred``, then long
    enough for the addon's 1 s refresh to pick it up."""
    eid = endpoint_id(node.url)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc = snapshot(stack)
        entry = next(u for u in doc["upstreams"] if u["id"] == eid)
        if pred(entry):
            time.sleep(1.5)
            return entry
        time.sleep(0.2)
    raise AssertionError(f"sidecar never reported the expected state for {node.name}: {entry}")


def served(node: Node) -> int:
    return node.state()["calls"].get(METHOD, 0)


async def spray(stack: Stack, n: int, clients: int = 4) -> list[Any]:
    ips = [next_client_ip() for _ in range(clients)]

    async def one(i: int) -> Any:
        return await post(stack.rpc_url(), call(METHOD, id_=i), client_ip=ips[i % clients])

    replies = []
    for start in range(0, n, clients):  # a few at a time: in-flight stays low
        replies += await asyncio.gather(*(one(i) for i in range(start, min(n, start + clients))))
    assert all(r.status == 200 and "result" in r.body for r in replies)
    return replies


async def test_a_lagging_node_gets_no_traffic_until_it_catches_up(rstack: Stack) -> None:
    lagging = rstack.nodes[0]
    wait_for(rstack, lagging, lambda u: u["tier"] == 0)
    lagging.control(lag=10)
    entry = wait_for(rstack, lagging, lambda u: u["tier"] == 1)
    # lag=10 as probed: heads are read at slightly different moments, so allow some skew.
    assert entry["lag"] >= 8 and entry["synced"] is False and entry["healthy"] is True
    before = served(lagging)
    await spray(rstack, 60)
    assert served(lagging) == before, "a lagging node received traffic while synced ones were up"

    lagging.control(lag=0)
    wait_for(rstack, lagging, lambda u: u["tier"] == 0)
    await asyncio.sleep(2)
    before = served(lagging)
    await spray(rstack, 90)
    assert served(lagging) > before, "the node got no traffic back after catching up"


async def test_a_slow_node_gets_clearly_less_than_an_equal_share(rstack: Stack) -> None:
    slow = rstack.nodes[1]
    slow.control(latency_ms=300)
    counts = [served(n) for n in rstack.nodes]
    await spray(rstack, 120)
    got = [served(n) - c for n, c in zip(rstack.nodes, counts, strict=True)]
    assert sum(got) == 120
    assert got[1] < 120 / 3 / 2, f"slow node share {got}"


async def test_a_dead_node_is_probed_dead_and_avoided(tmp_path_factory: Any) -> None:
    stack = build_stack(
        tmp_path_factory.mktemp("dead"), ("alpha", "beta", "gamma"), top=FAST_PROBES
    )
    try:
        victim = stack.nodes[2]
        wait_for(stack, victim, lambda u: u["tier"] == 0)
        victim.proc.stop()
        # One failed probe is not enough (flap damping): fail_threshold=2 of them are.
        entry = wait_for(
            stack, victim, lambda u: u["classification"] == "dead" and u["status"] == "Degraded"
        )
        assert entry["tier"] == 3 and entry["healthy"] is False
        replies = await spray(stack, 40)
        assert {r.headers["X-Chainproxy-Attempts"] for r in replies} == {"1"}
        assert endpoint_id(victim.url) not in {r.headers["X-Chainproxy-Upstream"] for r in replies}
        detail = http_json(f"{stack.sidecar_url}/api/v1/endpoints/{endpoint_id(victim.url)}")
        assert (
            detail["classification"] == "dead" and detail["probes"][0]["classification"] == "dead"
        )
    finally:
        stack.stop()


STORAGE_KEY = "0x26aa394eea5630e07c48ae0c9558cef702a5c1b19ab7a04f536c519aca4983ac"


async def test_state_older_than_the_pruning_window_is_served_by_the_archive(
    rstack: Stack,
) -> None:
    archive = rstack.nodes[2]
    wait_for(rstack, archive, lambda u: u["archive"] is True and u["tier"] == 0)
    ip = next_client_ip()
    # Unknown hash: a pruned node may answer first; the call fails over to the archive.
    old_hash = rstack.nodes[0].rpc("chain_getBlockHash", [10])["result"]
    for i in range(5):  # distinct keys: a repeated one would be a cache hit
        key = f"{STORAGE_KEY}{i:02x}"
        r = await post(rstack.rpc_url(), call("state_getStorage", [key, old_hash], i), client_ip=ip)
        assert r.status == 200 and "error" not in r.body, r.body
        assert r.headers["X-Chainproxy-Upstream"] == endpoint_id(archive.url)
    # Known hash (learned from chain_getBlockHash through the proxy): archive first.
    r = await post(rstack.rpc_url(), call("chain_getBlockHash", [20]), client_ip=ip)
    old_hash = r.body["result"]
    r = await post(
        rstack.rpc_url(), call("state_getStorage", [STORAGE_KEY, old_hash]), client_ip=ip
    )
    assert r.status == 200 and "error" not in r.body
    assert r.headers["X-Chainproxy-Upstream"] == endpoint_id(archive.url)
    assert r.headers["X-Chainproxy-Attempts"] == "1"


async def test_block_above_a_nodes_best_goes_to_one_that_has_it(rstack: Stack) -> None:
    behind = rstack.nodes[0]
    behind.control(lag=2)  # within max_lag: still tier 0, but its best is known lower
    wait_for(rstack, behind, lambda u: u["lag"] is not None and u["lag"] >= 2)
    tip = snapshot(rstack)["tip"]
    ip = next_client_ip()
    for i in range(10):
        r = await post(rstack.rpc_url(), call("chain_getBlockHash", [tip], i), client_ip=ip)
        assert r.status == 200 and r.body["result"] is not None
        assert r.headers["X-Chainproxy-Upstream"] != endpoint_id(behind.url)


async def test_proxy_keeps_serving_without_the_sidecar_and_resumes_its_snapshot(
    tmp_path_factory: Any,
) -> None:
    stack = build_stack(
        tmp_path_factory.mktemp("nosidecar"), ("alpha", "beta", "gamma"), top=FAST_PROBES
    )
    try:
        assert stack.sidecar is not None
        stack.sidecar.stop()
        await spray(stack, 30)
        stack.start_sidecar()  # same config and data_dir
        lagging = stack.nodes[1]
        lagging.control(lag=10)
        wait_for(stack, lagging, lambda u: u["tier"] == 1, timeout=30)
        await asyncio.sleep(10)  # the addon's back-off is capped at 10 s
        before = served(lagging)
        await spray(stack, 45)
        assert served(lagging) == before, "the addon did not pick up the snapshot again"
    finally:
        stack.stop()
