"""Scenario 10e: what one shared-quota check costs the *proxy's* process, in
one process against the run's redis-server, with nothing else on the loop:
``addon/redislink/pipe.py`` (the link the addon uses) against redis-py's asyncio
client sending the same ``EVALSHA`` (the baseline; the addon's first version
used it), one at a time and 32 at once. CPU seconds of this process ÷ checks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis.asyncio as aioredis

from addon.quota.local import RateLimiter
from addon.quota.redis_limiter import _SCRIPT, SharedLimiter
from addon.redislink.link import RedisLink
from common.config import RedisConfig

CHECKS = 6_000


async def _cpu_per_call(call: Callable[[int], Awaitable[Any]], concurrency: int) -> float:
    """µs of this process's CPU per call, after a warm-up."""
    for i in range(200):
        await call(i)
    started = time.process_time()
    per = CHECKS // concurrency

    async def lane(k: int) -> None:
        for i in range(per):
            await call(k * per + i)

    await asyncio.gather(*(lane(k) for k in range(concurrency)))
    return (time.process_time() - started) * 1e6 / (per * concurrency)


async def _measure(url: str) -> dict[str, float]:
    link = RedisLink(RedisConfig(url=url, key_prefix="bench10e:", timeout_ms=1000, safe_url=url))
    limiter = SharedLimiter(link, RateLimiter(10**9, 60, clock=time.monotonic))
    client = aioredis.Redis.from_url(url, decode_responses=False)
    sha = await client.script_load(_SCRIPT)

    async def pipe_check(i: int) -> Any:
        return await limiter.decide(f"c{i % 1000}")  # what the quota step calls

    async def redispy_check(i: int) -> Any:
        return await client.execute_command(
            "EVALSHA", sha, 1, limiter.key(f"c{i % 1000}"), 10**9, 60_000, 1, 1
        )

    out = {}
    for name, fn in (("pipe", pipe_check), ("redis-py", redispy_check)):
        for c in (1, 32):
            out[f"{name} c={c}"] = await _cpu_per_call(fn, c)
    await link.close()
    await client.aclose()
    return out


def client_cost(url: str) -> dict[str, float]:
    return asyncio.run(_measure(url))
