"""The diskcache store: shared between instances, bounded by size, and a deleted
directory, a corrupt database or a corrupt entry never an error."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from addon.cache.rules import plan
from addon.cache.store import DiskCacheStore
from addon.rpc.jsonrpc import Call

EXTRA = {"state_getStorage": 1, "state_call": 2}


def p(method: str, params: Any, finalized: int | None = 100, net: str = "finney") -> Any:
    return plan(net, Call(1, method, params), extra=EXTRA, finalized=finalized)


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


async def test_a_purge_forgets_every_entry_its_node_filled(tmp_path: Path) -> None:
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=1)
    for i in range(5):
        a.set(f"liar{i}", i, filler="liar")
    a.set("honest", "h", filler="honest")
    a.set("unknown", "u")
    assert a.get("liar0") == 0  # in the memory front too
    assert await a.purge("liar") == 5
    assert [a.get(f"liar{i}") for i in range(5)] == [None] * 5
    assert (a.get("honest"), a.get("unknown")) == ("h", "u")
    assert await a.purge("liar") == 0
    fresh = DiskCacheStore(tmp_path / "c", size_limit_mb=1)  # the tag is on the disk
    a.set("liar9", 9, filler="liar")
    a.flush()  # (written by the writer thread: another process sees it from then)
    await a.settled()
    assert fresh.get("liar9") == 9
    assert await fresh.purge("liar") == 1 and fresh.get("liar9") is None


async def test_another_process_drops_its_memory_front_after_a_purge(tmp_path: Path) -> None:
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=1)
    b = DiskCacheStore(tmp_path / "c", size_limit_mb=1)  # another proxy process
    a.set("liar", "0xbad", filler="liar")
    a.set("honest", "0x2a", filler="honest")
    a.flush()  # (written by the writer thread: another process sees it from then)
    await a.settled()
    assert b.get("liar") == "0xbad" and b.get("honest") == "0x2a"  # now in b's memory
    await a.purge("liar")
    b._purges_due = 0.0  # (b looks at the disk's counter at most once a second)
    assert b.get("liar") is None
    assert b.get("honest") == "0x2a"  # read again from the disk
    assert a._memo and a.get("honest") == "0x2a"  # the purging process keeps the rest
