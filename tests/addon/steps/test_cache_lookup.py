"""Block-pinned reads answered from the edge cache in the pipeline (a fake upstream):
a hit keeps the caller's id and makes no upstream call, a batch forwards only its
misses, hits count against the quota and are recorded as usage."""

from __future__ import annotations

from tests.addon.helpers import (
    body,
    cached_stages,
    call,
    rpc_flow,
    run,
)

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
    from addon.pipeline.runner import STEPS

    names = [s.__name__ for s in STEPS]
    assert names == [
        "allowlist",
        "subscription_limits",
        "rate_limit",
        "subscribe",
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
