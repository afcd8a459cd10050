"""Which keys the disk may hold (``addon/cache/disk_keys.py``): a miss of a key
never written skips the index once the filter is built; a key on disk, written
by this process or another, before or after the filter, is always asked of the
index (never a wrong miss past ``TRUST_S``); a failed or lost look, a quiet
process and a reopened database fall back to asking the index."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import diskcache
import pytest

from addon.cache import disk_io
from addon.cache import store as store_module
from addon.cache.disk_io import write
from addon.cache.disk_keys import (
    LOST_S,
    MAX_CAPACITY,
    MIN_CAPACITY,
    REFRESH_S,
    TRUST_S,
    DiskKeys,
    read_rows,
)
from addon.cache.store import DiskCacheStore


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Thread:
    """The writer thread, by hand: jobs wait until ``run``."""

    def __init__(self) -> None:
        self.jobs: list[tuple[Callable[[], Any], Callable[[Any, BaseException | None], None]]] = []

    def submit(
        self, job: Callable[[], Any], then: Callable[[Any, BaseException | None], None]
    ) -> bool:
        self.jobs.append((job, then))
        return True

    def run(self) -> None:
        jobs, self.jobs = self.jobs, []
        for job, then in jobs:
            try:
                result = job()
            except Exception as e:
                then(None, e)
            else:
                then(result, None)


def _entries(keys: list[str]) -> list[tuple[str, tuple[str, None]]]:
    return [(k, ('"0x01"', None)) for k in keys]


@pytest.fixture
def cache(tmp_path: Path) -> diskcache.Cache:
    c = diskcache.Cache(str(tmp_path / "c"))
    yield c
    c.close()


def test_the_filter_knows_the_keys_on_disk_and_skips_the_rest(cache: diskcache.Cache) -> None:
    write(cache, _entries(["old-1", "old-2"]))
    cache.set("by-set", "x")  # diskcache's own way of writing a key: found too
    clock, thread = Clock(), Thread()
    keys = DiskKeys(1000, thread.submit, clock)
    # before the first look every key may be on disk
    assert keys.may_hold(cache, "never") and not keys.ready
    assert len(thread.jobs) == 1
    assert keys.may_hold(cache, "never")  # the look is still out: no second one
    assert len(thread.jobs) == 1
    thread.run()
    assert keys.ready
    assert keys.may_hold(cache, "old-1") and keys.may_hold(cache, "by-set")
    never = [f"never-{i}" for i in range(1000)]
    skipped = sum(not keys.may_hold(cache, k) for k in never)
    assert skipped >= 950  # the 1 % of false positives, with room


def test_this_process_writes_are_held_from_the_hand_off(cache: diskcache.Cache) -> None:
    clock, thread = Clock(), Thread()
    keys = DiskKeys(1000, thread.submit, clock)
    keys.may_hold(cache, "x")
    thread.run()
    keys.handed({"mine": ('"1"', None)})  # not on disk yet: the thread has it
    assert keys.may_hold(cache, "mine")


def test_another_process_write_is_seen_by_the_next_look(cache: diskcache.Cache) -> None:
    clock, thread = Clock(), Thread()
    keys = DiskKeys(1000, thread.submit, clock)
    keys.may_hold(cache, "x")
    thread.run()
    write(cache, _entries(["theirs"]))  # another process, after the filter was built
    assert not keys.may_hold(cache, "theirs")  # within TRUST_S of the look: a miss
    clock.now += REFRESH_S
    assert not keys.may_hold(cache, "theirs")  # a look is out; the filter is still trusted
    thread.run()
    assert keys.may_hold(cache, "theirs")


def test_a_filter_not_looked_at_lately_is_not_used(cache: diskcache.Cache) -> None:
    clock, thread = Clock(), Thread()
    keys = DiskKeys(1000, thread.submit, clock)
    keys.may_hold(cache, "x")
    thread.run()
    write(cache, _entries(["theirs"]))
    clock.now += TRUST_S + 0.01  # a quiet process: its last look is old
    assert keys.may_hold(cache, "theirs")  # asks the index (and looks)
    assert keys.may_hold(cache, "never")  # until the look is back
    thread.run()
    assert keys.may_hold(cache, "theirs") and not keys.may_hold(cache, "never")


def test_a_failed_look_asks_the_index_until_one_works(cache: diskcache.Cache) -> None:
    clock, thread = Clock(), Thread()
    keys = DiskKeys(1000, thread.submit, clock)
    keys.may_hold(cache, "x")
    thread.run()
    assert not keys.may_hold(cache, "never")
    clock.now += REFRESH_S
    keys.may_hold(cache, "x")
    _, then = thread.jobs.pop()
    then(None, OSError("disk I/O error"))
    assert not keys.ready and keys.may_hold(cache, "never")
    clock.now += 1.0  # RETRY_S: a new look, a whole one
    keys.may_hold(cache, "x")
    thread.run()
    assert keys.ready and not keys.may_hold(cache, "never")


def test_a_look_that_never_comes_back_is_made_again(cache: diskcache.Cache) -> None:
    clock, thread = Clock(), Thread()
    keys = DiskKeys(1000, thread.submit, clock)
    keys.may_hold(cache, "x")
    thread.jobs.clear()  # its loop was closed: the answer is lost
    clock.now += LOST_S + 1
    assert keys.may_hold(cache, "never")
    assert len(thread.jobs) == 1
    thread.run()
    assert not keys.may_hold(cache, "never")


def test_without_a_loop_the_index_is_asked(cache: diskcache.Cache) -> None:
    keys = DiskKeys(1000, lambda job, then: False, Clock())
    assert keys.may_hold(cache, "never") and not keys.ready


def test_a_full_filter_is_built_again_from_the_disk(cache: diskcache.Cache) -> None:
    clock, thread = Clock(), Thread()
    keys = DiskKeys(10, thread.submit, clock)  # at least MIN_CAPACITY
    capacity = keys.capacity
    keys.may_hold(cache, "x")
    thread.run()
    write(cache, _entries([f"k{i}" for i in range(capacity + 1)]))
    clock.now += REFRESH_S
    keys.may_hold(cache, "x")
    thread.run()  # reads them all: more than it was sized for
    assert keys._keys > keys.capacity
    clock.now += REFRESH_S
    keys.may_hold(cache, "x")  # the next look builds a new one...
    keys.handed(["handed-meanwhile"])  # ...and what is handed on meanwhile goes in it
    thread.run()
    assert keys.capacity >= 2 * (capacity + 1)  # sized for what the disk holds
    assert keys._keys == capacity + 1
    assert keys.may_hold(cache, "k0") and keys.may_hold(cache, "handed-meanwhile")


def test_a_database_opened_again_starts_over(tmp_path: Path, cache: diskcache.Cache) -> None:
    clock, thread = Clock(), Thread()
    keys = DiskKeys(1000, thread.submit, clock)
    keys.may_hold(cache, "x")
    thread.run()
    other = diskcache.Cache(str(tmp_path / "other"))
    write(other, _entries(["there"]))
    try:
        assert keys.may_hold(other, "there") and not keys.ready
        thread.run()
        assert keys.may_hold(other, "there") and not keys.may_hold(other, "never")
    finally:
        other.close()


def test_rows_are_read_from_the_last_one_on(cache: diskcache.Cache) -> None:
    """The filter relies on how diskcache keeps rows: a new row takes the next
    rowid, and a ``str`` key is kept as itself with ``raw = 1``."""
    write(cache, _entries(["a", "b"]))
    first = read_rows(cache, 0, 100, rebuild=False)
    assert first.keys == ["a", "b"] and first.rows == 2
    write(cache, _entries(["c"]))
    cache.set("d", "x")
    later = read_rows(cache, first.after, 100, rebuild=False)
    assert later.keys == ["b", "c", "d"]  # from the last one read (a reused rowid)


def test_the_store_skips_the_index_for_keys_never_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probes: list[str] = []
    real = disk_io.on_disk

    def counting(cache: diskcache.Cache, key: str) -> bool:
        probes.append(key)
        return real(cache, key)

    monkeypatch.setattr(store_module, "on_disk", counting)
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=8)
    b = DiskCacheStore(tmp_path / "c", size_limit_mb=8)  # another proxy process

    async def scenario() -> None:
        a.set("mine", "0x01")
        a.flush()
        await a.settled()
        assert b.get("nothing-1") is None  # b's first look goes out: the index is asked
        await b.settled()
        probes.clear()
        assert b.get("nothing-2") is None and probes == []  # the filter said no
        assert b.get("mine") == "0x01" and probes == ["mine"]  # on disk before b looked
        a.set("later", "0x02")
        a.flush()
        await a.settled()
        await asyncio.sleep(TRUST_S)  # then b looks again before it trusts its filter
        assert b.get("later") == "0x02"
        await b.settled()
        probes.clear()
        assert b.get("nothing-3") is None and probes == []

    asyncio.run(scenario())
    a.close()
    b.close()


def test_the_first_filter_is_bounded_whatever_the_size_limit(cache: diskcache.Cache) -> None:
    keys = DiskKeys(10**12, Thread().submit, Clock())  # a 256 TB size limit
    assert keys.capacity == MAX_CAPACITY
    assert DiskKeys(0, Thread().submit, Clock()).capacity == MIN_CAPACITY
