"""The disk write leaves the request's path: inside a running loop ``set``
answers from memory at once and writes every key of the loop turn in one
transaction after it; without a loop it writes at once."""

from __future__ import annotations

import asyncio
from pathlib import Path

from addon.cache.store import MEMO_MAX_VALUE_BYTES, DiskCacheStore


def _count_transactions(store: DiskCacheStore) -> list[int]:
    cache = store._cache
    assert cache is not None
    seen: list[int] = []
    real = cache.transact

    def transact(*args: object, **kwargs: object) -> object:
        seen.append(1)
        return real(*args, **kwargs)

    cache.transact = transact  # type: ignore[method-assign]
    return seen


def test_writes_of_one_loop_turn_go_to_disk_after_it_in_one_transaction(tmp_path: Path) -> None:
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=8)
    b = DiskCacheStore(tmp_path / "c", size_limit_mb=8)  # another proxy process
    transactions = _count_transactions(a)
    big = "y" * (MEMO_MAX_VALUE_BYTES + 1)  # too large for the memory front

    async def scenario() -> None:
        a.set("k1", {"x": 1})
        a.set("k2", [2])
        a.set("big", big)
        # answered by the writer at once, from memory; not on disk yet
        assert a.get("k1") == {"x": 1} and a.get("big") == big
        assert b.get("k1") is None
        await asyncio.sleep(0)  # the loop turns: the flush runs
        assert b.get("k1") == {"x": 1} and b.get("k2") == [2] and b.get("big") == big

    asyncio.run(scenario())
    assert len(transactions) == 1


def test_a_key_deleted_before_its_write_is_not_written(tmp_path: Path) -> None:
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=8)
    b = DiskCacheStore(tmp_path / "c", size_limit_mb=8)

    async def scenario() -> None:
        a.set("k", "v")
        a.delete("k")
        assert a.get("k") is None
        await asyncio.sleep(0)
        assert b.get("k") is None

    asyncio.run(scenario())


def test_close_writes_what_is_pending(tmp_path: Path) -> None:
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=8)

    async def scenario() -> None:
        a.set("k", "v")
        a.close()

    asyncio.run(scenario())
    assert DiskCacheStore(tmp_path / "c", size_limit_mb=8).get("k") == "v"
