"""The edge cache's second tier in a real redis-server: shared between links, expiring,
foreign values a miss, and None while Redis is down."""

from __future__ import annotations

import asyncio
import time

from addon.cache.redis_tier import SharedCacheTier
from tests.addon.helpers import (
    redis_link,
)
from tests.redis_server import RedisServer


async def test_the_cache_tier_is_shared_and_expires(redis_server: RedisServer) -> None:
    a, b = redis_link(redis_server), redis_link(redis_server)
    ta, tb = SharedCacheTier(a, ttl_s=30), SharedCacheTier(b, ttl_s=30)
    assert await tb.get_many(["k1", "k2"]) == [None, None]
    ta.put("k1", {"number": "0x10"})
    ta.put("k2", "0xabc")
    deadline = time.monotonic() + 5
    while await tb.get_many(["k1"]) == [None] and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    assert await tb.get_many(["k1", "k2", "k3"]) == [{"number": "0x10"}, "0xabc", None]
    ttl = int(redis_server.command("TTL", ta.key("k1")).strip(b":\r\n"))
    assert 0 < ttl <= 30
    redis_server.command("SET", tb.key("junk"), "{not json")
    assert await tb.get_many(["junk"]) == [None]  # not ours: a miss, not an error
    redis_server.stop()
    assert await tb.get_many(["k1"]) is None  # unavailable: the caller goes upstream
    await a.close()
    await b.close()


async def test_writes_go_in_batches_one_in_flight_without_a_task(
    redis_server: RedisServer,
) -> None:
    link = redis_link(redis_server, timeout_ms=2000)
    tier = SharedCacheTier(link, ttl_s=30)
    await link.pipe.ping()
    tasks = len(asyncio.all_tasks())
    for i in range(50):  # one loop turn's answers: one batch
        tier.put(f"w{i}", i)
    assert len(asyncio.all_tasks()) == tasks
    await asyncio.sleep(0)  # the end of the turn: the batch leaves
    tier.put("next", "x")  # queued while the batch is in flight, sent after it
    assert "next" in "".join(tier._pending)
    deadline = time.monotonic() + 5
    while await tier.get_many(["next"]) == [None] and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    assert await tier.get_many(["w0", "w49", "next"]) == [0, 49, "x"]
    await link.close()
