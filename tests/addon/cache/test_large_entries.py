"""Large entries (``addon/cache/large.py``): written by the writer thread, answered
from memory until then, read back unparsed as ``RawJson`` when a plain string;
a delete or a purge while the thread writes is not undone by the write."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from addon.cache.large import BIG_WRITE_BYTES
from addon.cache.store import DiskCacheStore
from common.jsontext import RawJson, dumps

BLOB = "0x" + "cd" * BIG_WRITE_BYTES  # a large hex string, as a runtime API answers


def test_a_large_entry_is_written_by_a_thread_and_read_back_unparsed(tmp_path: Path) -> None:
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=16)
    b = DiskCacheStore(tmp_path / "c", size_limit_mb=16)  # another proxy process
    writers: list[str] = []
    cache = a._cache
    assert cache is not None
    real = cache.set

    def spying_set(*args: object, **kwargs: object) -> object:
        writers.append(threading.current_thread().name)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    cache.set = spying_set  # type: ignore[method-assign]

    async def scenario() -> None:
        a.set("big", BLOB, "node-1")
        a.set("small", "0x01", "node-1")
        assert a.get("big") == BLOB  # from memory at once
        await asyncio.sleep(0)
        await a.settled()
        got = b.get("big")
        assert isinstance(got, RawJson) and got == BLOB
        assert dumps({"result": got}) == dumps({"result": BLOB})
        assert b.get("small") == "0x01"

    asyncio.run(scenario())
    # the small one on the loop, the large one by the writer thread
    assert sorted(w.split("_")[0] for w in writers) == ["MainThread", "chainproxy-cache"]


def test_a_large_entry_that_is_not_a_string_is_parsed(tmp_path: Path) -> None:
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=16)
    value = {"block": ["0x" + "ef" * 100] * 400}

    async def scenario() -> None:
        a.set("k", value)
        await asyncio.sleep(0)
        await a.settled()

    asyncio.run(scenario())
    assert DiskCacheStore(tmp_path / "c", size_limit_mb=16).get("k") == value


def test_a_raw_value_is_stored_as_its_text(tmp_path: Path) -> None:
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=16)
    raw = RawJson(dumps(BLOB))
    a.set("k", raw)  # no loop: written at once
    got = DiskCacheStore(tmp_path / "c", size_limit_mb=16).get("k")
    assert isinstance(got, RawJson) and got.text == raw.text


def test_a_delete_while_the_thread_writes_stays_deleted(tmp_path: Path) -> None:
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=16)
    b = DiskCacheStore(tmp_path / "c", size_limit_mb=16)

    async def scenario() -> None:
        a.set("big", BLOB)
        await asyncio.sleep(0)  # handed to the thread
        a.delete("big")  # a cross-check found it wrong
        assert a.get("big") is None
        await a.settled()
        await asyncio.sleep(0)
        assert b.get("big") is None and a.get("big") is None

    asyncio.run(scenario())


def test_a_purge_waits_for_the_writes_in_flight(tmp_path: Path) -> None:
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=16)

    async def scenario() -> None:
        a.set("big", BLOB, "liar")
        a.set("other", BLOB + "00", "honest")
        await asyncio.sleep(0)
        assert await a.purge("liar") == 1
        assert a.get("big") is None and a.get("other") == BLOB + "00"

    asyncio.run(scenario())


def test_close_waits_for_the_thread(tmp_path: Path) -> None:
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=16)

    async def scenario() -> None:
        a.set("big", BLOB)
        await asyncio.sleep(0)
        a.close()

    asyncio.run(scenario())
    assert DiskCacheStore(tmp_path / "c", size_limit_mb=16).get("big") == BLOB
