"""The edge cache's second tier in a real redis-server: shared between links, expiring,
foreign values a miss, and None while Redis is down."""

from __future__ import annotations

import asyncio
import time

from addon.cache.memory_store import MemoryStore
from addon.cache.redis_tier import TRIM_MARGIN_S, SharedCacheTier
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


async def _shared(tier: SharedCacheTier, key: str) -> None:
    """Until ``key`` written by ``tier`` is in Redis (writes go in the background)."""
    deadline = time.monotonic() + 5
    while await tier.get_many([key]) == [None] and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)


async def test_a_purge_deletes_every_shared_entry_its_node_filled(
    redis_server: RedisServer,
) -> None:
    a, b = redis_link(redis_server), redis_link(redis_server)
    ta, tb = SharedCacheTier(a, ttl_s=30), SharedCacheTier(b, ttl_s=30)
    for i in range(1200):  # more than one chunk of a purge
        ta.put(f"liar{i}", i, filler="liar")
    ta.put("honest", "0x2a", filler="honest")
    ta.put("old", "0x01")  # written without its filler (an older proxy): never purged
    await _shared(ta, "old")
    fill = MemoryStore()
    assert await tb.get_many(["liar7", "honest", "old"], fill=fill) == [7, "0x2a", "0x01"]
    # the copy another proxy keeps locally knows its filler too
    assert fill.fillers == {"liar7": "liar", "honest": "honest"}
    ttl = int(redis_server.command("TTL", ta.index_key("liar")).strip(b":\r\n"))
    assert 30 < ttl <= 30 + TRIM_MARGIN_S  # the set lives as long as its entries
    tb.put("liar-late", "x", filler="liar")  # queued, not sent yet: dropped by the purge
    assert await tb.purge("liar") == 1200
    keys = ["liar0", "liar1199", "liar-late", "honest", "old"]
    assert await tb.get_many(keys) == [None, None, None, "0x2a", "0x01"]
    assert redis_server.command("EXISTS", ta.index_key("liar")) == b":0\r\n"
    assert await tb.purge("liar") == 0
    await a.close()
    await b.close()


async def test_members_of_expired_entries_are_trimmed(redis_server: RedisServer) -> None:
    link = redis_link(redis_server, timeout_ms=2000)
    tier = SharedCacheTier(link, ttl_s=30)
    index = tier.index_key("n")
    redis_server.command("ZADD", index, str(time.time() - TRIM_MARGIN_S - 1), "gone-long-ago")
    tier.put("k", 1, filler="n")
    await _shared(tier, "k")
    members = await link.pipe.submit("ZRANGE", index, 0, -1)
    assert members == [tier.key("k").encode()]
    await link.close()
