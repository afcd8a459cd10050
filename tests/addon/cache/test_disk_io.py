"""The disk's side of the edge cache (``addon/cache/disk_io.py``): every entry
written by the writer thread, answered from memory until then; large ones
read back unparsed as ``RawJson`` when a plain string; a delete or a purge
while the thread writes is not undone by the write; a key never stored found
so by the index probe, which relies on how diskcache keeps ``str`` keys."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from typing import Any

import diskcache
import pytest

from addon.cache import disk_io
from addon.cache.disk_io import on_disk, write
from addon.cache.store import DiskCacheStore
from addon.rpc.splice import RAW_MIN_BYTES
from common.jsontext import RawJson, dumps

BLOB = "0x" + "cd" * RAW_MIN_BYTES  # a large hex string, as a runtime API answers


def test_a_large_entry_is_written_by_a_thread_and_read_back_unparsed(tmp_path: Path) -> None:
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=16)
    b = DiskCacheStore(tmp_path / "c", size_limit_mb=16)  # another proxy process
    writers: list[str] = []
    cache = a._cache
    assert cache is not None
    real = cache.transact

    def spying_transact(*args: object, **kwargs: object) -> object:
        writers.append(threading.current_thread().name)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    cache.transact = spying_transact  # type: ignore[method-assign]

    async def scenario() -> None:
        a.set("big", BLOB, "node-1")
        a.set("small", "0x01", "node-1")
        assert a.get("big") == BLOB  # from memory at once
        a.flush()
        await a.settled()
        got = b.get("big")
        assert isinstance(got, RawJson) and got == BLOB
        assert dumps({"result": got}) == dumps({"result": BLOB})
        assert b.get("small") == "0x01"

    asyncio.run(scenario())
    # both by the writer thread (one transaction), never on the loop
    assert [w.split("_")[0] for w in writers] == ["chainproxy-cache"]


def test_a_large_entry_that_is_not_a_string_is_parsed(tmp_path: Path) -> None:
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=16)
    value = {"block": ["0x" + "ef" * 100] * 400}

    async def scenario() -> None:
        a.set("k", value)
        a.flush()
        await a.settled()

    asyncio.run(scenario())
    assert DiskCacheStore(tmp_path / "c", size_limit_mb=16).get("k") == value


def test_a_raw_value_is_stored_as_its_text(tmp_path: Path) -> None:
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=16)
    raw = RawJson(dumps(BLOB))
    a.set("k", raw)  # no loop: written at once
    got = DiskCacheStore(tmp_path / "c", size_limit_mb=16).get("k")
    assert isinstance(got, RawJson) and got.text == raw.text


def _stalled(store: DiskCacheStore, *methods: str) -> threading.Event:
    """The store's disk work in the writer thread waits until the event is
    set: its writes (a chunk's rows in one ``transact``; a value of a file of
    its own by ``set``), or the ``methods`` named. Only in that thread: the
    loop's own reads never wait."""
    cache = store._cache
    assert cache is not None
    release = threading.Event()
    for name in methods or ("transact", "set"):
        real = getattr(cache, name)

        def stalled(*args: object, _real: Any = real, **kwargs: object) -> object:
            if threading.current_thread() is not threading.main_thread():
                release.wait(10)
            return _real(*args, **kwargs)

        setattr(cache, name, stalled)
    return release


def test_a_delete_while_the_thread_writes_stays_deleted(tmp_path: Path) -> None:
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=16)
    b = DiskCacheStore(tmp_path / "c", size_limit_mb=16)
    release = _stalled(a)

    async def scenario() -> None:
        a.set("big", BLOB)
        a.flush()  # the thread holds it, not written yet
        a.delete("big")  # a cross-check found it wrong: queued behind the write
        assert a.get("big") is None
        release.set()
        await a.settled()
        assert b.get("big") is None and a.get("big") is None

    asyncio.run(scenario())


def test_an_entry_on_disk_is_not_answered_once_its_delete_is_queued(tmp_path: Path) -> None:
    """Written, then found wrong: until the thread has deleted it, the row the
    disk still holds is not answered (it was, by the index probe, in the
    milliseconds before the thread's delete ran)."""
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=16)

    async def scenario() -> None:
        a.set("big", BLOB)
        a.flush()
        await a.settled()
        a._memo.clear()  # (so the disk answers)
        assert a.get("big") == BLOB
        release = _stalled(a, "delete")
        a.delete("big")
        assert a.get("big") is None  # the row is still there: not answered
        release.set()
        await a.settled()
        assert a.get("big") is None and not a._writes.deleting

    asyncio.run(scenario())
    assert DiskCacheStore(tmp_path / "c", size_limit_mb=16).get("big") is None


def test_deleted_then_stored_again_keeps_the_new_value(tmp_path: Path) -> None:
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=16)
    release = _stalled(a)

    async def scenario() -> None:
        a.set("k", "0xbad")
        a.flush()  # held in the thread
        a.delete("k")  # found wrong
        a.set("k", "0x600d")  # asked again, answered right
        a.flush()
        assert a.get("k") == "0x600d"
        release.set()
        await a.settled()
        assert a.get("k") == "0x600d"

    asyncio.run(scenario())
    assert DiskCacheStore(tmp_path / "c", size_limit_mb=16).get("k") == "0x600d"


def test_settled_returns_when_the_writes_ended_before_it_was_awaited(tmp_path: Path) -> None:
    # 3.12's gather of futures already done returns without yielding: a loop
    # that waited with it spun forever once a write's future was done and its
    # callback (which takes it off the list) not run yet
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=16)

    async def scenario() -> None:
        a.set("k", "0x01", "node")
        a.flush()
        (future,) = a._writes._futures
        while not future.done():  # noqa: ASYNC110  # a turn at a time: the callback still queued
            await asyncio.sleep(0)
        assert await a.purge("node") == 1  # a purge waits with settled()

    runner = threading.Thread(target=asyncio.run, args=(scenario(),), daemon=True)
    runner.start()
    runner.join(10)
    assert not runner.is_alive(), "settled() never returned"


def test_a_cancelled_wait_cancels_no_write(tmp_path: Path) -> None:
    # a purge cancelled (a stop) while batches wait for the thread: they are
    # still written and reported, not dropped as if written
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=16)
    release = _stalled(a)

    async def scenario() -> None:
        a.set("first", "0x01")
        a.flush()
        a.set("second", "0x02")
        a.flush()  # queued behind the first
        waiter = asyncio.ensure_future(a.settled())
        await asyncio.sleep(0)
        waiter.cancel()
        release.set()
        await a.settled()
        assert a.errors == 0 and a._writes.bytes == 0

    asyncio.run(scenario())
    fresh = DiskCacheStore(tmp_path / "c", size_limit_mb=16)
    assert (fresh.get("first"), fresh.get("second")) == ("0x01", "0x02")


def test_eviction_is_set_for_this_process_only(tmp_path: Path) -> None:
    DiskCacheStore(tmp_path / "c", size_limit_mb=16).close()
    other = diskcache.Cache(str(tmp_path / "c"))  # another version, or a tool
    assert other.cull_limit == 10  # diskcache's default: still culls on every set
    other.close()


def test_a_purge_waits_for_the_writes_in_flight(tmp_path: Path) -> None:
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=16)

    async def scenario() -> None:
        a.set("big", BLOB, "liar")
        a.set("other", BLOB + "00", "honest")
        a.flush()
        assert await a.purge("liar") == 1
        assert a.get("big") is None and a.get("other") == BLOB + "00"

    asyncio.run(scenario())


def test_close_waits_for_the_thread(tmp_path: Path) -> None:
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=16)

    async def scenario() -> None:
        a.set("big", BLOB)
        a.flush()
        a.close()

    asyncio.run(scenario())
    assert DiskCacheStore(tmp_path / "c", size_limit_mb=16).get("big") == BLOB


def test_the_index_probe_finds_what_diskcache_stored_and_nothing_else(tmp_path: Path) -> None:
    cache = diskcache.Cache(str(tmp_path / "c"))
    cache.set("v1|finney|k", '"0x01"', tag="node-1")
    cache.set(b"bytes-key", "x")  # not a str key: never ours
    assert on_disk(cache, "v1|finney|k")
    assert not on_disk(cache, "v1|finney|other")
    assert not on_disk(cache, "bytes-key")
    cache.close()


def test_a_batch_is_written_as_diskcache_writes_it(tmp_path: Path) -> None:
    """The one-statement write keeps diskcache's bookkeeping: its own reads,
    count and consistency check see the rows as if ``set`` wrote them."""
    cache = diskcache.Cache(str(tmp_path / "c"), disk_min_file_size=1 << 12, tag_index=True)
    cache.set("v1|file", "f" * 5000, tag="node-0")  # a file of its own (≥ min_file_size)
    write(cache, [("v1|a", ('"0x01"', "node-1")), ("v1|b", ("[1]", None))])
    write(cache, [("v1|a", ('"0x02"', "node-2")), ("v1|big", ("g" * 5000, "node-3"))])
    write(cache, [("v1|file", ("small", "node-4"))])  # a file's row is left as it was
    cache.set("v1|pickled", {"a": 1})  # a row of another mode, then a text over it
    write(cache, [("v1|pickled", ('{"a":1}', "node-5"))])
    assert cache.get("v1|pickled", tag=True) == ('{"a":1}', "node-5")
    cache.delete("v1|pickled")
    assert cache.get("v1|a", tag=True) == ('"0x02"', "node-2")
    assert cache.get("v1|b", tag=True) == ("[1]", None)
    assert cache.get("v1|big", tag=True) == ("g" * 5000, "node-3")
    assert cache.get("v1|file", tag=True) == ("f" * 5000, "node-0")
    assert len(cache) == 4 and cache.check() == []  # count and size triggers agree
    assert cache.evict("node-2") == 1 and cache.get("v1|a") is None  # the tag index holds
    cache.close()


def test_without_sqlite_s_upsert_each_entry_goes_by_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(disk_io, "UPSERT_WORKS", False)  # SQLite before 3.24
    cache = diskcache.Cache(str(tmp_path / "c"), tag_index=True)
    sets: list[str] = []
    real = cache.set

    def counting_set(key: str, *args: object, **kwargs: object) -> object:
        sets.append(key)
        return real(key, *args, **kwargs)  # type: ignore[arg-type]

    cache.set = counting_set  # type: ignore[method-assign]
    write(cache, [("v1|a", ('"0x01"', "node-1")), ("v1|b", ("[1]", None))])
    assert sets == ["v1|a", "v1|b"]
    assert cache.get("v1|a", tag=True) == ('"0x01"', "node-1") and cache.check() == []
    cache.close()


def test_a_missing_key_costs_the_probe_not_a_get(tmp_path: Path) -> None:
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=16)
    a.set("k", "0x01")  # no loop: on disk at once
    b = DiskCacheStore(tmp_path / "c", size_limit_mb=16)
    cache = b._cache
    assert cache is not None
    gets: list[object] = []
    real = cache.get

    def counting_get(*args: object, **kwargs: object) -> object:
        gets.append(args[0])
        return real(*args, **kwargs)  # type: ignore[arg-type]

    cache.get = counting_get  # type: ignore[method-assign]
    assert b.get("nothing") is None
    assert b.get("k") == "0x01"
    assert "nothing" not in gets and "k" in gets


def test_eviction_keeps_the_disk_near_its_size_limit(tmp_path: Path) -> None:
    # culling runs once per batch written, not on every set (cull_limit=0)
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=1)
    value = "0x" + "ab" * 2000  # 4 KB each: 1,000 of them are 4 MB

    async def scenario() -> None:
        for i in range(1_000):
            a.set(f"k{i}", value)
            if i % 100 == 99:
                a.flush()
        a.flush()
        await a.settled()

    asyncio.run(scenario())
    cache = a._cache
    assert cache is not None
    assert cache.volume() <= 1_048_576 + 64 * 1024  # the limit, give or take a page batch
    assert len(cache) < 300  # most went; the newest stay
    assert on_disk(cache, "k999") and not on_disk(cache, "k0")
    a.close()


def test_a_disk_behind_the_answers_holds_a_bounded_backlog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from addon.cache import disk_io

    monkeypatch.setattr(disk_io, "MAX_WRITING_BYTES", 10_000)
    caplog.set_level(logging.INFO, logger="chainproxy.cache")
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=16)
    release = _stalled(a)  # a disk that stopped answering
    value = "0x" + "ab" * 3000  # 6 KB

    async def scenario() -> None:
        a.set("first", value)
        a.flush()  # handed to the thread, which stalls on it
        a.set("second", value)
        a.flush()  # 6 KB behind: still handed on
        assert a._writes.bytes == 2 * len(dumps(value))
        a.set("third", value)
        a.flush()  # 12 KB behind, past the bound: not written, not kept
        assert a.get("third") is None and a.errors == 1
        assert a.get("first") == value  # still waiting in the thread: from memory
        release.set()
        await a.settled()
        assert a._writes.bytes == 0
        a.set("fourth", value)
        a.flush()
        await a.settled()
        await asyncio.sleep(0)

    asyncio.run(scenario())
    fresh = DiskCacheStore(tmp_path / "c", size_limit_mb=16)
    assert [fresh.get(k) for k in ("first", "second", "third", "fourth")] == [
        value,
        value,
        None,
        value,
    ]
    messages = [r.getMessage() for r in caplog.records]
    assert sum("cache disk behind" in m for m in messages) == 1
    assert sum("cache disk caught up; 1 batch(es)" in m for m in messages) == 1
