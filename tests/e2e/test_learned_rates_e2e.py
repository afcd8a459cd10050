"""A learned rate shared through a real redis-server, on real processes: a
node answers 429 beyond a limit nobody told the proxies (the simulator's
``limit_rps``); one proxy provokes and learns it; a second proxy on the same
Redis, which never got a 429 itself, then sends the node no more than its
limit in any second (the node's own log of arrivals) and provokes no 429,
with its excess on the other node: 0 client errors throughout."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from simnode.arrivals import busiest
from tests.e2e.harness import Stack, base_config
from tests.e2e.helpers import PROXY_DEFAULTS, Reply, call, client_session, post
from tests.redis_server import REDIS_SERVER, RedisServer

pytestmark = pytest.mark.e2e

QUIET_PROBES = {"probe": {"interval_s": 60, "head_interval_s": 60, "timeout_s": 1}}
NO_QUOTA = {"rate_limit": {"requests": 1_000_000, "window_s": 60}}
LIMIT = 8  # alpha's calls in any second, unannounced
_keys = iter(range(10**9))


async def _offer(url: str, rate: float, seconds: float) -> list[Reply]:
    """``rate`` calls a second for ``seconds``, open loop, each a cache miss, from
    one client keeping its connections alive (a connection set up per call would
    make the offered rate follow how busy the machine is)."""
    tasks = []
    async with client_session() as session:
        start = time.monotonic()
        for i in range(round(rate * seconds)):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            body = call("state_getStorage", [f"0x{next(_keys):064x}"])
            tasks.append(asyncio.create_task(post(url, body, session=session)))
        return await asyncio.gather(*tasks)


def _proxied_since(arrivals: list[dict[str, Any]], since: float) -> list[dict[str, Any]]:
    return [a for a in arrivals if a["agent"] == "chainproxy" and a["t"] >= since]


@pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed")
async def test_one_proxys_429_teaches_another_on_the_same_redis(tmp_path: Any) -> None:
    redis = RedisServer(tmp_path).start()
    stack = Stack(tmp_path)
    try:
        epoch = time.time() - 600
        alpha, beta = stack.start_node("alpha", epoch=epoch), stack.start_node("beta", epoch=epoch)
        config = base_config(tmp_path, stack.nodes, top=QUIET_PROBES, **PROXY_DEFAULTS, **NO_QUOTA)
        config["redis"] = {"url": redis.url}
        stack.write_config(config)
        stack.start_sidecar()
        stack.start_proxy()
        _, second = stack.start_chainproxy(
            "mitmdump-2",
            stack.config_path,
            stack.config["sidecar"]["url"],  # type: ignore[arg-type]
        )
        beta.control(latency_ms=40)  # alpha is the faster: each proxy prefers it
        alpha.reset()  # its counters and log (and faults: the limit comes after)
        alpha.control(limit_rps=LIMIT)

        # the first proxy, fresh: sends alpha more than it allows, and learns
        first = await _offer(stack.rpc_url(), rate=2.5 * LIMIT, seconds=2)
        # what a proxy that knows nothing sends it: more than it allows, so alpha
        # refused some of that proxy's calls (its log says whose: the sidecar's
        # probes count toward the limit too, so neither the count of 429s nor the
        # proxy's own busiest second alone shows it)
        assert any(a["refused"] for a in _proxied_since(alpha.arrivals(), 0.0)), alpha.state()
        # A first cut is taken from what the proxy counts in its window, which
        # holds a call a window past its end: above the node's count, by more on
        # a loaded machine, so the rate may take a few cuts more to come under
        # the limit. The lesson is the one the proxy keeps: until a second
        # passes without a refusal (on an idle machine, the first such second).
        for _ in range(10):
            since = time.time()
            first += await _offer(stack.rpc_url(), rate=2.5 * LIMIT, seconds=1)
            if not [a for a in _proxied_since(alpha.arrivals(), since) if a["refused"]]:
                break
        else:
            raise AssertionError(
                f"the first proxy never settled under alpha's limit: {alpha.state()}"
            )

        # the second proxy never had a 429 from alpha: it knows the rate from Redis
        since = time.time()
        replies = await _offer(f"{second}/rpc/v1/finney", rate=2.5 * LIMIT, seconds=3)
        mine = _proxied_since(alpha.arrivals(), since)
        assert not [a for a in mine if a["refused"]]  # it provoked no 429
        most, window = busiest(mine)
        assert most <= LIMIT, window  # no second, as alpha counts, above its limit
        assert sum(a["calls"] for a in mine) >= LIMIT  # alpha was used, not avoided
        assert beta.state()["requests"] > 0  # the excess went to beta

        every = [*first, *replies]
        assert all(r.status == 200 and "result" in r.body for r in every), {r.status for r in every}
    finally:
        stack.stop()
        redis.stop()
