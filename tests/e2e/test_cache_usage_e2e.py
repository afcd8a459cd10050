"""The edge cache and usage statistics end to end: real nodes, sidecar and
mitmdump; counts read back from the public usage API."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import diskcache
import pytest

from addon.reporting.spool import calls_in
from common.endpoint_id import endpoint_id
from tests.e2e.harness import Stack, http_json
from tests.e2e.helpers import (
    build_stack,
    call,
    next_client_ip,
    post,
    sidecar_routes,
    usage_delivered,
    wait_until,
)

pytestmark = pytest.mark.e2e

FAST = {
    "probe": {"interval_s": 1, "head_interval_s": 0.5, "timeout_s": 1},
}
PROXY = {"usage": {"flush_s": 0.5}, "cache": {"methods": {"state_getStorage": 1}}}


@pytest.fixture
def cstack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = build_stack(tmp_path_factory.mktemp("cache"), ("alpha", "beta"), top=FAST, **PROXY)
    yield s
    s.stop()


def usage(stack: Stack, network: str | None = None) -> dict[str, Any]:
    q = f"?network={network}" if network else ""
    return http_json(f"{stack.proxy_url}/api/v1/usage{q}")


async def wait_usage(stack: Stack, requests: int, timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    doc: dict[str, Any] = {}
    while time.monotonic() < deadline:
        doc = usage(stack)
        if doc["requests"] >= requests:
            return doc
        await asyncio.sleep(0.3)
    raise AssertionError(f"usage never reached {requests}: {doc}")


async def until(pred: Any, timeout: float, step: float = 0.3) -> bool:
    """Poll another process's state (there is no event to wait on)."""
    for _ in range(int(timeout / step)):
        if pred():
            return True
        await asyncio.sleep(step)
    return bool(pred())


def finalized(stack: Stack) -> int | None:
    return sidecar_routes(stack)["finalized"]  # type: ignore[no-any-return]


async def until_both_synced(stack: Stack) -> None:
    await wait_until(
        lambda: all(u["tier"] == 0 for u in sidecar_routes(stack)["upstreams"]),
        20,
        "the sidecar probed both nodes synced",
        step=0.2,
    )


async def until_the_proxy_uses_both(stack: Stack, ip: str) -> int:
    """Calls until the proxy has sent one to each node (its routing snapshot,
    read from the sidecar a moment later than the sidecar's own view, has both
    in its best tier); how many were made."""
    ids = {u["id"] for u in sidecar_routes(stack)["upstreams"]}
    seen: set[str] = set()
    made = 0
    deadline = time.monotonic() + 20
    while seen != ids:
        assert time.monotonic() < deadline, f"the proxy used only {seen} of {ids}"
        r = await post(stack.rpc_url(), call("system_health", id_=made), client_ip=ip)
        made += 1
        seen.add(r.headers.get("X-Chainproxy-Upstream", ""))
        await asyncio.sleep(0.05)
    return made


def spooled_calls(stack: Stack) -> int:
    """The calls in the proxy's usage spool on disk (a diskcache Index the
    proxy processes of a machine share: reading it from here is safe)."""
    index = diskcache.Index(str(Path(stack.config["data_dir"]) / "spool"))
    try:
        return sum(calls_in(batch) for batch in index.values())
    finally:
        index.cache.close()


async def test_a_block_fetched_once_is_served_with_every_upstream_dead(cstack: Stack) -> None:
    h = cstack.nodes[0].rpc("chain_getBlockHash", [100])["result"]
    ip = next_client_ip()
    r = await post(cstack.rpc_url(), call("chain_getBlock", [h], id_="a"), client_ip=ip)
    assert r.status == 200 and r.headers["X-Cache"] == "MISS"
    assert cstack.proxy is not None
    cstack.proxy.stop()  # the cache is on disk: it survives a proxy restart
    cstack.start_proxy()
    for node in cstack.nodes:
        node.proc.stop()
    r2 = await post(cstack.rpc_url(), call("chain_getBlock", [h], id_="b"), client_ip=ip)
    assert r2.status == 200 and r2.headers["X-Cache"] == "HIT"
    assert r2.body["id"] == "b" and r2.body["result"] == r.body["result"]
    r3 = await post(cstack.rpc_url(), call("chain_getHeader", id_="c"), client_ip=ip)
    assert r3.status == 502  # not pinned: not cached


async def test_future_block_hash_is_null_then_the_real_hash_once_final(cstack: Stack) -> None:
    await until(lambda: finalized(cstack) is not None, 15)
    # blocks every 2 s in the simulator: this one is made 6 to 8 s from now (the
    # sidecar's view is older, by a stalled probe on a loaded machine too)
    future = int(cstack.nodes[0].rpc("chain_getHeader")["result"]["number"], 16) + 4
    ip = next_client_ip()
    r = await post(cstack.rpc_url(), call("chain_getBlockHash", [future]), client_ip=ip)
    assert r.status == 200 and r.body["result"] is None and r.headers["X-Cache"] == "MISS"
    # final at the sidecar, and one block more: the addon's snapshot refresh is
    # awaited by a probe block (hex form, its own cache key) that becomes a HIT
    probe = future + 1
    assert await until(lambda: (finalized(cstack) or 0) >= probe, 30)
    probe_hash = cstack.nodes[0].rpc("chain_getBlockHash", [probe])["result"]

    async def probe_cached() -> bool:
        r = await post(cstack.rpc_url(), call("chain_getBlockHash", [hex(probe)]))
        assert r.body["result"] == probe_hash
        return r.headers["X-Cache"] == "HIT"

    await wait_until(probe_cached, 20, "the proxy caches a block hash final in its snapshot")
    expected = cstack.nodes[0].rpc("chain_getBlockHash", [future])["result"]
    r = await post(cstack.rpc_url(), call("chain_getBlockHash", [future]), client_ip=ip)
    assert r.body["result"] == expected and r.headers["X-Cache"] == "MISS"
    r = await post(cstack.rpc_url(), call("chain_getBlockHash", [hex(future)]), client_ip=ip)
    assert r.body["result"] == expected and r.headers["X-Cache"] == "HIT"


async def test_usage_counts_exactly_the_calls_made(tmp_path_factory: Any) -> None:
    # Slow probes: the sidecar does not notice beta's fault during the test, so
    # calls that meet beta first fail over (until the addon ejects it).
    slow = {"probe": {"interval_s": 60, "head_interval_s": 30, "timeout_s": 1}}
    # the calls until the proxy uses both nodes and until one meets beta's fault
    # are as many as the machine's pace makes them (fx56: past the default
    # quota of 100 a minute): no quota in the way of a count of calls
    quota = {"rate_limit": {"requests": 100_000, "window_s": 60}}
    stack = build_stack(
        tmp_path_factory.mktemp("usage"), ("alpha", "beta"), top=slow, **PROXY, **quota
    )
    try:
        # the first probe round has both nodes healthy (the next is a minute away)
        await until_both_synced(stack)
        ip = next_client_ip()
        calls = await until_the_proxy_uses_both(stack, ip)  # its snapshot has both
        alpha, beta = stack.nodes
        # The proxy sends a call to the cheaper of its nodes by their answers'
        # latency: two equal nodes may leave beta unchosen for long. So alpha
        # answers slowly until the proxy prefers beta, then beta fails: its next
        # call meets beta's fault and fails over.
        alpha.control(latency_ms=150)
        deadline = time.monotonic() + 20
        while True:
            assert time.monotonic() < deadline, "the proxy never preferred beta"
            r = await post(stack.rpc_url(), call("system_health", id_=calls), client_ip=ip)
            assert r.status == 200
            calls += 1
            if r.headers.get("X-Chainproxy-Upstream") == endpoint_id(beta.url):
                break
        alpha.control(latency_ms=0)
        beta.control(http_status=503)
        h = alpha.rpc("chain_getBlockHash", [7])["result"]
        failovers = hits = 0
        deadline = time.monotonic() + 20
        while not failovers:  # until a call meets beta's fault
            assert time.monotonic() < deadline, "no call met beta"
            r = await post(stack.rpc_url(), call("system_health", id_=calls), client_ip=ip)
            assert r.status == 200
            calls += 1
            failovers += r.headers.get("X-Chainproxy-Attempts", "1") != "1"
            await asyncio.sleep(0.1)
        for i in range(30):
            body = call("system_health", id_=i) if i % 2 else call("chain_getBlock", [h], i)
            r = await post(stack.rpc_url(), body, client_ip=ip)
            assert r.status == 200
            calls += 1
            hits += r.headers["X-Cache"] == "HIT"
            failovers += r.headers.get("X-Chainproxy-Attempts", "1") != "1"
        r = await post(
            stack.rpc_url(),
            [call("system_chain", id_=1), call("chain_getBlock", [h], 2)],
            client_ip=ip,
        )
        calls += 2
        hits += 1
        failovers += r.headers.get("X-Chainproxy-Attempts", "1") != "1"
        await post(stack.rpc_url(), call("author_submitExtrinsic", ["0x"]), client_ip=ip)  # refused
        doc = await wait_usage(stack, calls)
        await usage_delivered(stack)  # every batch of the calls above has arrived ...
        await asyncio.sleep(1)  # ... and, a little later, nothing more did
        doc = usage(stack)
        assert doc["requests"] == calls
        assert doc["cache_hits"]["count"] == hits == 15
        assert doc["failover"]["count"] == failovers >= 1
        assert doc["errors"]["count"] == 0 and doc["success"]["count"] == calls
        assert doc["by_network"] == {"finney": calls, "test": 0}
        assert doc["freshness"] == "fresh" and doc["updated"].endswith("Z")
        assert isinstance(doc["p50_ms"], int) and doc["p95_ms"] >= doc["p50_ms"]
        assert sum(e["requests"] for e in doc["endpoints"]) == calls - hits
        assert doc["endpoints"][0]["endpoint"] == "alpha-finney-rpc"
        assert usage(stack, "test")["requests"] == 0
    finally:
        stack.stop()


async def test_every_call_is_counted_once_across_sidecar_and_proxy_restarts(
    cstack: Stack,
) -> None:
    ip = next_client_ip()
    sent = 0

    async def burst(n: int) -> None:
        nonlocal sent
        for i in range(n):
            r = await post(cstack.rpc_url(), call("system_health", id_=i), client_ip=ip)
            assert r.status == 200
            sent += 1

    await burst(10)
    await wait_usage(cstack, 10)
    assert cstack.sidecar is not None
    cstack.sidecar.stop()
    await burst(15)  # the sidecar is down: spooled on disk
    await wait_until(lambda: spooled_calls(cstack) >= 15, 20, "the 15 calls are spooled on disk")
    cstack.start_sidecar()
    doc = await wait_usage(cstack, 25, timeout=30)
    assert doc["requests"] == 25

    # A graceful proxy stop with records not yet shipped: they are sent after restart.
    await burst(5)
    assert cstack.proxy is not None
    cstack.proxy.stop()
    cstack.start_proxy()
    doc = await wait_usage(cstack, 30, timeout=30)
    await usage_delivered(cstack)  # every batch, the spooled ones first, has arrived ...
    await asyncio.sleep(1)  # ... and, a little later, nothing more did
    assert usage(cstack)["requests"] == sent == 30
