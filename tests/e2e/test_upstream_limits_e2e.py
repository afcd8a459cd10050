"""A good citizen upstream, through real processes: a node's Retry-After is
honoured, a node's budget (``max_rps``) is never exceeded (by one proxy, or by
two sharing it through Redis), calls beyond every budget are shed with 503
``upstream_capacity`` and a Retry-After within about a second, and scarce
capacity is shared fairly between a light and a heavy client."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from common.endpoint_id import endpoint_id
from tests.e2e.harness import Stack, base_config
from tests.e2e.helpers import PROXY_DEFAULTS, Reply, call, next_client_ip, post
from tests.redis_server import REDIS_SERVER, RedisServer

pytestmark = pytest.mark.e2e

# probes once a minute: the nodes' counts below are the clients' calls
QUIET_PROBES = {"probe": {"interval_s": 60, "head_interval_s": 60, "timeout_s": 1}}
NO_QUOTA = {"rate_limit": {"requests": 1_000_000, "window_s": 60}}
_keys = iter(range(10**9))


def _miss() -> dict[str, Any]:
    """A storage read of a key never asked before: a cache miss every time."""
    return call("state_getStorage", [f"0x{next(_keys):064x}"])


def _stack(tmp: Any, budgets: dict[str, dict[str, int]], *, redis: str | None = None) -> Stack:
    stack = Stack(tmp)
    epoch = time.time() - 600
    for name in budgets:
        stack.start_node(name, epoch=epoch)
    config = base_config(tmp, stack.nodes, top=QUIET_PROBES, **{**PROXY_DEFAULTS, **NO_QUOTA})
    for e, node in zip(config["registry"]["endpoints"], stack.nodes, strict=True):
        e.update(budgets[node.name])
    if redis is not None:
        config["redis"] = {"url": redis}
    stack.write_config(config)
    stack.start_sidecar()
    stack.start_proxy()
    return stack


async def _offer(url: str, rate: float, seconds: float, ip: str | None = None) -> list[Reply]:
    """``rate`` calls a second (each a miss) for ``seconds``, open loop."""
    ip = ip or next_client_ip()
    tasks = []
    start = time.monotonic()
    for i in range(round(rate * seconds)):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(post(url, _miss(), client_ip=ip)))
    return await asyncio.gather(*tasks)


@pytest.fixture
def two_nodes(tmp_path: Any) -> Iterator[Stack]:
    stack = _stack(tmp_path, {"alpha": {}, "beta": {}})
    try:
        yield stack
    finally:
        stack.stop()


async def test_retry_after_keeps_client_calls_off_the_node(two_nodes: Stack) -> None:
    alpha, beta = two_nodes.nodes
    beta.control(latency_ms=40)  # alpha is the faster: it would get most calls
    alpha.control(limit_rps=1, limit_retry_after_s=5)
    alpha_id = endpoint_id(f"{alpha.url}")
    seen: list[tuple[float, Reply]] = []
    ip = next_client_ip()
    start = time.monotonic()
    while time.monotonic() - start < 7.0:
        r = await post(two_nodes.rpc_url(), _miss(), client_ip=ip)
        seen.append((time.monotonic(), r))
        await asyncio.sleep(0.03)
    assert all(r.status == 200 and "result" in r.body for _, r in seen)  # 0 client errors
    # the first 429 (the proxy failed over to beta): alpha pauses 5 s
    first = next(t for t, r in seen if r.headers.get("X-Chainproxy-Attempts") == "2")
    during = [r for t, r in seen if first < t < first + 4.8]
    assert len(during) > 40
    assert all(r.headers["X-Chainproxy-Upstream"] != alpha_id for r in during)
    assert all(r.headers["X-Chainproxy-Attempts"] == "1" for r in during)
    assert alpha.state()["rate_limited"] <= 3  # the 429 and the calls already in flight
    assert beta.state()["requests"] > 40


@pytest.fixture
def capped(tmp_path: Any) -> Iterator[Stack]:
    stack = _stack(tmp_path, {"alpha": {"max_rps": 20}, "beta": {"max_rps": 20}})
    try:
        yield stack
    finally:
        stack.stop()


async def test_budgets_hold_and_the_excess_is_shed_with_retry_after(capped: Stack) -> None:
    for n in capped.nodes:
        n.reset()
    t0 = time.monotonic()
    replies = await _offer(capped.rpc_url(), rate=100, seconds=4)
    took = time.monotonic() - t0
    for n in capped.nodes:
        assert n.state()["max_rps_seen"] <= 20, n.state()
    ok = [r for r in replies if r.status == 200]
    shed = [r for r in replies if r.status == 503]
    assert len(ok) + len(shed) == len(replies), {r.status for r in replies}
    assert 100 <= len(ok) <= 40 * 4 + 40  # the two budgets, used
    assert len(shed) > 100
    for r in shed:
        assert int(r.headers["Retry-After"]) >= 1
        data = r.body["error"]["data"]
        assert data["policy"] == "upstream_capacity" and data["retry_after"] >= 1
        assert "budget" in r.body["error"]["message"]
    assert took < 4 + 2.5  # shed within about a second of the last call, never a hang


async def test_scarce_capacity_is_shared_fairly(tmp_path: Any) -> None:
    stack = _stack(tmp_path, {"alpha": {"max_rps": 10}})
    try:
        # demands 1:10 (10 and 100 calls a second), both above a fair share of 10/s
        light, heavy = await asyncio.gather(
            _offer(stack.rpc_url(), rate=10, seconds=5),
            _offer(stack.rpc_url(), rate=100, seconds=5),
        )
        served = {
            name: sum(r.status == 200 for r in rs)
            for name, rs in (("light", light), ("heavy", heavy))
        }
        assert all(r.status in (200, 503) for r in [*light, *heavy])
        assert served["light"] >= 10 and served["heavy"] >= 10, served
        ratio = max(served.values()) / min(served.values())
        assert ratio <= 2.0, served  # within 2x, not 10x
    finally:
        stack.stop()


@pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed")
async def test_two_proxies_on_one_redis_respect_one_budget(tmp_path: Any) -> None:
    redis = RedisServer(tmp_path).start()
    stack = _stack(tmp_path, {"alpha": {"max_rps": 20}}, redis=redis.url)
    try:
        _, second = stack.start_chainproxy(
            "mitmdump-2",
            stack.config_path,
            stack.config["sidecar"]["url"],  # type: ignore[arg-type]
        )
        stack.nodes[0].reset()
        results = await asyncio.gather(
            _offer(stack.rpc_url(), rate=30, seconds=4),
            _offer(f"{second}/rpc/v1/finney", rate=30, seconds=4),
        )
        state = stack.nodes[0].state()
        assert state["max_rps_seen"] <= 20, state  # one budget for the two
        oks = [sum(r.status == 200 for r in rs) for rs in results]
        assert all(n >= 15 for n in oks), oks  # both proxies got a share
    finally:
        stack.stop()
        redis.stop()
