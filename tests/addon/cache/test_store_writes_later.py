"""The disk write leaves the request's path: inside a running loop ``set``
answers from memory at once, and the writes of the next ``WRITE_EVERY_S`` (or
``WRITE_BATCH`` of them) go to disk in one transaction, by the writer thread;
without a loop it writes at once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from addon.cache.disk_io import CHUNK_ENTRIES
from addon.cache.disk_keys import TRUST_S
from addon.cache.store import MEMO_MAX_VALUE_BYTES, WRITE_BATCH, WRITE_EVERY_S, DiskCacheStore


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


def test_writes_of_a_window_go_to_disk_after_it_in_one_transaction(tmp_path: Path) -> None:
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
        await asyncio.sleep(0)  # a loop turn is not the window
        assert b.get("k1") is None
        await asyncio.sleep(WRITE_EVERY_S * 1.5)  # the window ends: handed to the thread
        await a.settled()
        # b's filter of the disk's keys is from before: it is used until its look
        # is TRUST_S old, then b asks the disk again (addon/cache/disk_keys.py)
        await asyncio.sleep(TRUST_S)
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
        a.flush()
        await a.settled()
        assert b.get("k") is None

    asyncio.run(scenario())


def test_close_writes_what_is_pending(tmp_path: Path) -> None:
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=8)

    async def scenario() -> None:
        a.set("k", "v")
        a.close()

    asyncio.run(scenario())
    assert DiskCacheStore(tmp_path / "c", size_limit_mb=8).get("k") == "v"


def test_a_full_batch_goes_before_the_window_ends(tmp_path: Path) -> None:
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=8)
    b = DiskCacheStore(tmp_path / "c", size_limit_mb=8)
    transactions = _count_transactions(a)

    async def scenario() -> None:
        for i in range(WRITE_BATCH):
            a.set(f"k{i}", i)
        await a.settled()  # no wait for the window: the batch was full
        assert b.get("k0") == 0 and b.get(f"k{WRITE_BATCH - 1}") == WRITE_BATCH - 1
        a.set("later", 1)  # the next window starts empty
        assert a._pending == {"later": ("1", None)}
        a.close()  # writes what is pending: one transaction more

    asyncio.run(scenario())
    # the full batch, a transaction per chunk (the loop's own disk work waits for one at most)
    assert len(transactions) == WRITE_BATCH // CHUNK_ENTRIES + 1
    time.sleep(TRUST_S)  # b's filter of the disk's keys is from before "later" was written
    assert b.get("later") == 1


def test_a_failed_write_in_the_thread_is_a_miss_counted_once_logged(tmp_path: Path) -> None:
    counted: list[str] = []
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=8, on_error=counted.append)
    cache = a._cache
    assert cache is not None

    def failing_transact(*args: object, **kwargs: object) -> object:
        raise OSError(28, "No space left on device")

    cache.transact = failing_transact  # type: ignore[method-assign]

    async def scenario() -> None:
        a.set("k", "v")
        assert a.get("k") == "v"  # from memory until the write is known to fail
        a.flush()
        await a.settled()
        await asyncio.sleep(0)  # the thread's outcome reaches the loop
        assert a.get("k") is None  # not on disk: not answered from memory either
        assert a.errors == 1 and counted == ["write"]  # the metric's op label

    asyncio.run(scenario())
