"""Block-pinned reads answered from the edge cache in the pipeline (a fake upstream):
a hit keeps the caller's id and makes no upstream call, a batch forwards only its
misses, hits count against the quota and are recorded as usage."""

from __future__ import annotations

import asyncio

from addon.cache.redis_tier import SharedCacheTier
from tests.addon.helpers import (
    body,
    cached_stages,
    call,
    redis_link,
    rpc_flow,
    run,
)
from tests.redis_server import RedisServer

H = "0x" + "ab" * 32

H2 = "0x" + "cd" * 32


async def test_second_read_is_a_hit_with_the_callers_id_and_no_upstream_call() -> None:
    stages, fake, _ = cached_stages()
    f1 = await run(stages, rpc_flow(call("chain_getBlock", [H], id_="first")))
    assert f1.response.headers["X-Cache"] == "MISS" and len(fake.seen) == 1
    f2 = await run(stages, rpc_flow(call("chain_getBlock", [H], id_=99)))
    assert f2.response.headers["X-Cache"] == "HIT"
    assert body(f2) == {"jsonrpc": "2.0", "id": 99, "result": "chain_getBlock-ok"}
    assert len(fake.seen) == 1
    assert f2.metadata["chainproxy"]["cache"] == "HIT"
    assert f2.metadata["chainproxy"]["upstream"] is None


async def test_batch_forwards_only_the_misses_and_merges_in_order() -> None:
    stages, fake, _ = cached_stages()
    await run(stages, rpc_flow(call("chain_getHeader", [H], id_=0)))
    fake.seen.clear()
    f = await run(
        stages,
        rpc_flow(
            [
                call("system_chain", id_=1),
                call("chain_getHeader", [H], id_=2),
                call("chain_getBlock", [H2], id_=3),
            ]
        ),
    )
    assert [a["id"] for a in body(f)] == [1, 2, 3]
    assert body(f)[1]["result"] == "chain_getHeader-ok"
    assert [c["method"] for c in fake.seen[0][1]] == ["system_chain", "chain_getBlock"]
    assert f.response.headers["X-Cache"] == "MISS"  # not everything came from the cache


async def test_cache_hits_count_against_the_rate_limit() -> None:
    stages, _, _ = cached_stages(rate_limit={"requests": 2, "window_s": 60})
    for _ in range(2):
        await run(stages, rpc_flow(call("chain_getBlock", [H])))
    f = await run(stages, rpc_flow(call("chain_getBlock", [H])))
    assert f.response.status_code == 429


async def test_usage_records_hits_and_misses() -> None:
    stages, _, rt = cached_stages()
    await run(stages, rpc_flow(call("chain_getBlock", [H])))
    await run(stages, rpc_flow(call("chain_getBlock", [H])))
    await run(stages, rpc_flow(call("author_submitExtrinsic", ["0x"])))  # refused: not counted
    rollups = rt.usage.drain()
    total = sum(r["requests"] for r in rollups)
    hits = sum(r["cache_hits"] for r in rollups)
    assert (total, hits) == (2, 1)
    hit_row = next(r for r in rollups if r["cache_hits"])
    assert hit_row["endpoint"] is None and hit_row["method"] == "chain_getBlock"


def test_the_pipeline_looks_up_the_cache_before_forwarding_and_stores_after() -> None:
    from addon.hooks.pipeline import STEPS

    names = [s.__name__ for s in STEPS]
    assert names == [
        "allowlist",
        "subscription_limits",
        "rate_limit",
        "subscribe",
        "new_spec_reads",
        "chain_head",
        "head_answer",
        "pin_to_head",
        "cache_lookup",
        "reserve_bytes",
        "forward_pending",
        "learn",
        "cache_store",
        "charge_bytes",
        "record",
        "respond",
    ]


async def test_a_read_cached_by_another_proxy_is_a_hit_from_redis(
    redis_server: RedisServer,
) -> None:
    """Two proxies, one Redis, the quota shared too: the second proxy's local
    tier misses, the MGET's reply is applied by callback and the call goes on
    from there to the answer, with no upstream call."""
    a, fake_a, rt_a = cached_stages()
    b, fake_b, rt_b = cached_stages()
    links = [redis_link(redis_server, timeout_ms=2000) for _ in range(2)]
    for rt, link in zip((rt_a, rt_b), links, strict=True):
        rt.quotas.use_redis(link)
        rt.shared_cache = SharedCacheTier(link, ttl_s=60)
    miss = await run(a, rpc_flow(call("chain_getBlock", [H], id_="a")))
    assert miss.response.headers["X-Cache"] == "MISS" and len(fake_a.seen) == 1
    (cache_key,) = rt_a.cache.data  # type: ignore[union-attr]
    key = rt_a.shared_cache.key(cache_key)  # type: ignore[union-attr]
    for _ in range(200):  # the write goes out after the answer
        if redis_server.command("EXISTS", key) == b":1\r\n":
            break
        await asyncio.sleep(0.01)
    hit = await run(b, rpc_flow(call("chain_getBlock", [H], id_=7)))
    assert hit.response.headers["X-Cache"] == "HIT" and fake_b.seen == []
    assert body(hit) == {"jsonrpc": "2.0", "id": 7, "result": "chain_getBlock-ok"}
    assert rt_b.cache.get(cache_key) is not None  # filled locally from Redis
    for link in links:
        await link.close()
