"""Cache rules (pure), the diskcache store's failure behaviour, and the Cache
stage in the pipeline with a fake upstream."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from addon.cache.rules import answer_from, entries_to_store, plan
from addon.cache.store import DiskCacheStore, MemoryStore
from addon.pipeline.jsonrpc import Call
from tests.addon.test_stages import body, call, make, rpc_flow, run

H = "0x" + "ab" * 32
H2 = "0x" + "cd" * 32
EXTRA = {"state_getStorage": 1, "state_call": 2}


def p(method: str, params: Any, finalized: int | None = 100, net: str = "finney") -> Any:
    return plan(net, Call(1, method, params), extra=EXTRA, finalized=finalized)


@pytest.mark.parametrize("params", [[5], ["0x5"], ["5"], [[5]], [["0x5"]]])
def test_block_hash_forms_share_one_entry_per_height(params: list[Any]) -> None:
    got = p("chain_getBlockHash", params)
    assert got is not None and got.keys == ("v1|finney|blockhash|5",)
    assert got.is_list == isinstance(params[0], list)


def test_block_hash_list_is_one_entry_per_height_and_answers_a_list() -> None:
    got = p("chain_getBlockHash", [[1, "0x2", 3]])
    assert got is not None and len(got.keys) == 3
    assert answer_from(got, ["a", "b", "c"]) == ["a", "b", "c"]
    assert entries_to_store(got, ["a", None, "c"]) == [(got.keys[0], "a"), (got.keys[2], "c")]
    assert entries_to_store(got, ["a", "b"]) == []  # wrong length: nothing stored


@pytest.mark.parametrize(
    ("params", "finalized"),
    [([101], 100), ([[5, 101]], 100), ([5], None), ([], 100), ([-1], 100), (["zz"], 100)],
)
def test_block_hash_above_finality_or_unknown_finality_is_not_cached(
    params: list[Any], finalized: int | None
) -> None:
    assert p("chain_getBlockHash", params, finalized=finalized) is None


def test_hash_pinned_reads_are_cached_with_canonical_params() -> None:
    a = p("chain_getBlock", [H])
    b = p("chain_getBlock", [H.upper().replace("0X", "0x")])
    assert a is not None and b is not None and a.keys == b.keys
    assert p("chain_getHeader", [H]) is not None
    assert p("chain_getHeader", []) is None  # the head: not pinned
    assert p("chain_getBlock", ["0x1234"]) is None  # not a block hash
    assert p("state_getStorage", ["0xkey", H]) is not None
    assert p("state_getStorage", ["0x00"]) is None  # no block: the latest state
    assert p("state_getMetadata", [H]) is not None  # a hash-optional read at a hash
    assert p("state_getMetadata", []) is None  # at the head: not pinned, not cached
    assert p("state_call", ["Core_version", "0x", H]) is not None
    assert p("chain_getBlock", {"hash": H}) is None  # named params: not cached
    assert p("chain_getBlock", [H], net="test") != p("chain_getBlock", [H])


def test_null_and_the_id_never_enter_the_cache() -> None:
    got = p("chain_getBlock", [H])
    assert got is not None
    assert entries_to_store(got, None) == []
    one = plan("finney", Call(1, "chain_getBlock", [H]), extra=EXTRA, finalized=None)
    other = plan("finney", Call("x", "chain_getBlock", [H]), extra=EXTRA, finalized=None)
    assert one == other


# --- the store ------------------------------------------------------------------------------


def test_disk_store_round_trip_and_shared_between_instances(tmp_path: Path) -> None:
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=1)
    b = DiskCacheStore(tmp_path / "c", size_limit_mb=1)  # another proxy process
    a.set("k", {"x": [1, 2]})
    assert b.get("k") == {"x": [1, 2]}
    assert a.get("missing") is None


def test_disk_store_bounded_by_size(tmp_path: Path) -> None:
    s = DiskCacheStore(tmp_path / "c", size_limit_mb=1)
    blob = "x" * 20_000
    for i in range(400):  # ~8 MB written into a 1 MB cache
        s.set(f"k{i}", blob)
    s._cache.cull()
    assert s._cache.volume() < 3 * 1_048_576
    assert s.get("k399") == blob  # the most recent survive


def test_deleted_cache_directory_is_never_an_error(tmp_path: Path) -> None:
    s = DiskCacheStore(tmp_path / "c", size_limit_mb=1)
    s.set("k", 1)
    shutil.rmtree(tmp_path / "c")
    assert s.get("k") in (1, None)  # the open handle may still answer; never raises
    s.set("k2", 2)
    assert s.get("k2") in (2, None)


def test_corrupt_cache_database_is_set_aside_and_the_proxy_starts(tmp_path: Path) -> None:
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "cache.db").write_bytes(b"this is not sqlite" * 100)
    s = DiskCacheStore(tmp_path / "c", size_limit_mb=1)
    assert s.get("k") is None
    s.set("k", 5)
    assert s.get("k") == 5
    assert any(p.name.startswith("c.corrupt-") for p in tmp_path.iterdir())


def test_corrupt_entry_is_a_miss(tmp_path: Path) -> None:
    s = DiskCacheStore(tmp_path / "c", size_limit_mb=1)
    s._cache.set("k", "{not json")
    assert s.get("k") is None and s.errors == 1


# --- the stage in the pipeline --------------------------------------------------------------


def cached_stages(**proxy: Any) -> tuple[list[Any], Any, Any]:
    stages, fake, rt = make(**proxy)
    rt.cache = MemoryStore()
    return stages, fake, rt


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


async def test_errors_and_nulls_are_not_cached() -> None:
    stages, fake, _ = cached_stages()

    def null_answer(doc: Any) -> tuple[int, bytes]:
        return 200, json.dumps({"jsonrpc": "2.0", "id": doc["id"], "result": None}).encode()

    def error_answer(doc: Any) -> tuple[int, bytes]:
        err = {"code": -32602, "message": "Invalid params"}
        return 200, json.dumps({"jsonrpc": "2.0", "id": doc["id"], "error": err}).encode()

    for behaviour in (null_answer, error_answer):
        fake.behaviour = {u: behaviour for u in ("http://a.example:9944", "http://b.example:9944")}
        fake.seen.clear()
        for _ in range(2):
            f = await run(stages, rpc_flow(call("state_getStorage", ["0x01", H2])))
            assert f.response.headers["X-Cache"] == "MISS"
        assert len(fake.seen) == 2  # each call went upstream again


async def test_block_hash_is_cached_only_below_finality() -> None:
    stages, _, rt = cached_stages()
    await run(stages, rpc_flow(call("chain_getBlockHash", [50])))  # finality unknown
    f = await run(stages, rpc_flow(call("chain_getBlockHash", [50])))
    assert f.response.headers["X-Cache"] == "MISS"
    rt.chain.set_heights("finney", 120, 100)
    await run(stages, rpc_flow(call("chain_getBlockHash", [50])))
    f = await run(stages, rpc_flow(call("chain_getBlockHash", ["0x32"])))
    assert f.response.headers["X-Cache"] == "HIT"
    await run(stages, rpc_flow(call("chain_getBlockHash", [110])))
    f = await run(stages, rpc_flow(call("chain_getBlockHash", [110])))
    assert f.response.headers["X-Cache"] == "MISS"


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
        "forward_pending",
        "learn",
        "cache_store",
        "record",
        "respond",
    ]
