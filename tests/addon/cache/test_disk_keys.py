"""Which keys the disk may hold (``addon/cache/disk_keys.py``): a miss of a key
never written skips the index once the filter is built; a key on disk, written
by this process (with or without the writer thread) or by another, before or
after the filter, is asked of the index (another process's within ``TRUST_S``);
a failed, late or lost look, a deleted last row, a quiet process and a
reopened database fall back to asking the index."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import diskcache
import pytest

from addon.cache import disk_io
from addon.cache import store as store_module
from addon.cache.disk_io import DiskWrites, write
from addon.cache.disk_keys import (
    LOST_S,
    MAX_CAPACITY,
    MIN_CAPACITY,
    REFRESH_S,
    RETRY_S,
    TRUST_S,
    DiskKeys,
    read_rows,
)
from addon.cache.store import MEMO_MAX_VALUE_BYTES, DiskCacheStore


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


def _keys(capacity: int = 1000) -> tuple[DiskKeys, Thread, Clock, list[BaseException]]:
    thread, clock, failures = Thread(), Clock(), []
    return DiskKeys(capacity, thread.submit, failures.append, clock), thread, clock, failures


def _built(cache: diskcache.Cache, capacity: int = 1000) -> tuple[DiskKeys, Thread, Clock]:
    keys, thread, clock, _ = _keys(capacity)
    keys.may_hold(cache, "x")
    thread.run()
    assert keys.ready
    return keys, thread, clock


@pytest.fixture
def cache(tmp_path: Path) -> Iterator[diskcache.Cache]:
    c = diskcache.Cache(str(tmp_path / "c"), tag_index=True)
    yield c
    c.close()


def test_the_filter_knows_the_keys_on_disk_and_skips_the_rest(cache: diskcache.Cache) -> None:
    write(cache, _entries(["old-1", "old-2"]))
    cache.set("by-set", "x")  # diskcache's own way of writing a key: found too
    keys, thread, _, _ = _keys()
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
    keys, _, _ = _built(cache)
    keys.handed({"mine": ('"1"', None)})  # not on disk yet: the thread has it
    assert keys.may_hold(cache, "mine")


def test_another_process_write_is_seen_by_the_next_look(cache: diskcache.Cache) -> None:
    keys, thread, clock = _built(cache)
    write(cache, _entries(["theirs"]))  # another process, after the filter was built
    assert not keys.may_hold(cache, "theirs")  # within TRUST_S of the look: a miss
    clock.now += REFRESH_S
    assert not keys.may_hold(cache, "theirs")  # a look is out; the filter is still trusted
    thread.run()
    assert keys.may_hold(cache, "theirs")


def test_a_filter_not_looked_at_lately_is_not_used(cache: diskcache.Cache) -> None:
    keys, thread, clock = _built(cache)
    write(cache, _entries(["theirs"]))
    clock.now += TRUST_S + 0.01  # a quiet process: its last look is old
    assert keys.may_hold(cache, "theirs")  # asks the index (and looks)
    assert keys.may_hold(cache, "never")  # until the look is back
    thread.run()
    assert keys.may_hold(cache, "theirs") and not keys.may_hold(cache, "never")


def test_a_failed_look_asks_the_index_until_one_works(cache: diskcache.Cache) -> None:
    keys, thread, clock, failures = _keys()
    keys.may_hold(cache, "x")
    _, then = thread.jobs.pop()
    then(None, OSError("disk I/O error"))  # the first look, a rebuild, failed
    assert failures and not keys.ready and keys.may_hold(cache, "never")
    clock.now += REFRESH_S
    keys.may_hold(cache, "x")
    assert thread.jobs == []  # not before RETRY_S
    clock.now += RETRY_S
    keys.may_hold(cache, "x")
    thread.run()
    assert keys.ready and not keys.may_hold(cache, "never")


def test_a_failed_look_at_new_rows_keeps_the_filter(cache: diskcache.Cache) -> None:
    keys, thread, clock = _built(cache)
    clock.now += REFRESH_S
    keys.may_hold(cache, "x")
    _, then = thread.jobs.pop()
    then(None, OSError("disk I/O error"))
    assert keys.ready  # not a rebuild: the filter is whole, only not fresh
    write(cache, _entries(["theirs"]))
    clock.now += TRUST_S  # no look came back: it is not trusted, the index is asked
    assert keys.may_hold(cache, "theirs") and keys.may_hold(cache, "never")
    clock.now += RETRY_S
    keys.may_hold(cache, "x")
    thread.run()
    assert keys.may_hold(cache, "theirs") and not keys.may_hold(cache, "never")
    assert thread.jobs == [] and len(keys._handed_meanwhile or []) == 0


def test_a_look_that_never_comes_back_is_made_again(cache: diskcache.Cache) -> None:
    keys, thread, clock, _ = _keys()
    keys.may_hold(cache, "x")
    thread.jobs.clear()  # its loop was closed: the answer is lost
    clock.now += LOST_S + 1
    assert keys.may_hold(cache, "never")
    assert len(thread.jobs) == 1
    thread.run()
    assert not keys.may_hold(cache, "never")


def test_a_late_look_after_a_newer_one_is_dropped(cache: diskcache.Cache) -> None:
    keys, thread, clock, _ = _keys()
    keys.may_hold(cache, "x")
    late = thread.jobs.pop()  # slow, not lost
    clock.now += LOST_S + 1
    keys.may_hold(cache, "x")  # a second rebuild goes out
    write(cache, _entries(["theirs"]))  # after the late one's read, before the new one's
    late_result = late[0]()
    keys.handed(["mine"])  # handed on while the new rebuild is out
    late[1](late_result, None)  # the late one comes back first: dropped
    assert not keys.ready
    thread.run()
    assert keys.ready
    assert keys.may_hold(cache, "mine") and keys.may_hold(cache, "theirs")


def test_without_a_loop_the_index_is_asked_and_a_later_loop_looks(cache: diskcache.Cache) -> None:
    loop_runs = [False]
    thread, clock = Thread(), Clock()

    def submit(job: Callable[[], Any], then: Callable[[Any, BaseException | None], None]) -> bool:
        return loop_runs[0] and thread.submit(job, then)

    keys = DiskKeys(1000, submit, lambda e: None, clock)
    assert keys.may_hold(cache, "never") and not keys.ready
    loop_runs[0] = True
    clock.now += RETRY_S
    keys.may_hold(cache, "never")
    thread.run()
    assert keys.ready and not keys.may_hold(cache, "never")


def test_a_full_filter_is_built_again_from_the_disk(cache: diskcache.Cache) -> None:
    keys, thread, clock = _built(cache, capacity=10)  # at least MIN_CAPACITY
    capacity = keys.capacity
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


def test_idle_looks_count_no_keys(cache: diskcache.Cache) -> None:
    write(cache, _entries(["a"]))
    keys, thread, clock = _built(cache)
    for _ in range(100):
        clock.now += REFRESH_S
        keys.may_hold(cache, "x")
        thread.run()
    assert keys._keys == 1  # the last row is read again each time, not counted again


@pytest.mark.parametrize("deleted", [["c"], ["c", "b"]])
def test_a_deleted_last_row_builds_a_new_filter(cache: diskcache.Cache, deleted: list[str]) -> None:
    write(cache, _entries(["a", "b", "c"]))
    keys, thread, clock = _built(cache)
    for key in deleted:  # the newest rows go (a cross-check, a purge)...
        cache.delete(key)
    write(cache, _entries(["theirs"]))  # ...so the next row takes c's rowid, or b's
    clock.now += REFRESH_S
    keys.may_hold(cache, "x")
    thread.run()
    assert not keys.ready  # the look saw its last row gone: every key asked
    assert keys.may_hold(cache, "theirs") and keys.may_hold(cache, "never")
    clock.now += REFRESH_S
    keys.may_hold(cache, "x")
    thread.run()
    assert keys.ready and keys.may_hold(cache, "theirs") and not keys.may_hold(cache, "never")


def test_a_database_opened_again_starts_over(tmp_path: Path, cache: diskcache.Cache) -> None:
    keys, thread, _ = _built(cache)
    other = diskcache.Cache(str(tmp_path / "other"))
    write(other, _entries(["there"]))
    try:
        assert keys.may_hold(other, "there") and not keys.ready
        thread.run()
        assert keys.may_hold(other, "there") and not keys.may_hold(other, "never")
    finally:
        other.close()


def test_the_first_filter_is_bounded_whatever_the_size_limit() -> None:
    assert DiskKeys(10**12, Thread().submit, print, Clock()).capacity == MAX_CAPACITY
    assert DiskKeys(0, Thread().submit, print, Clock()).capacity == MIN_CAPACITY


def test_rows_are_read_as_diskcache_keeps_them(cache: diskcache.Cache) -> None:
    """The filter relies on how diskcache keeps rows: a new row takes the next
    rowid; a ``str`` key is kept as itself with ``raw = 1``, in the index
    ``Cache_key_raw``; ``len`` is the count of entries."""
    write(cache, _entries(["a", "b"]))
    cache.set("c", "x")  # a value written by diskcache's ``set``
    first = read_rows(cache, None, 100, rebuild=False)
    assert first.keys == ["a", "b", "c"] and first.rows == 3 and first.last is not None
    write(cache, _entries(["d"]))
    later = read_rows(cache, first.last, 100, rebuild=False)
    assert later.keys == ["d"] and later.rows == 1 and later.last is not None
    assert later.last[1] == "d" and later.last[0] > first.last[0]
    whole = read_rows(cache, None, 100, rebuild=True)
    assert whole.bloom is not None and whole.rows == 4 and whole.last == later.last
    assert all(k in whole.bloom for k in "abcd") and whole.capacity >= 2 * len(cache)
    plan = cache._sql(
        "EXPLAIN QUERY PLAN SELECT key FROM Cache INDEXED BY Cache_key_raw"
    ).fetchall()
    assert "Cache_key_raw" in str(plan)


def test_the_writer_thread_gives_a_look_back_or_its_error() -> None:
    writes = DiskWrites()
    got: list[tuple[Any, BaseException | None]] = []

    def boom() -> None:
        raise OSError("disk I/O error")

    async def scenario() -> None:
        assert writes.read(lambda: 42, lambda r, e: got.append((r, e)))
        assert writes.read(boom, lambda r, e: got.append((r, e)))
        await writes.settled()

    asyncio.run(scenario())
    writes.close()
    assert got[0] == (42, None)
    assert got[1][0] is None and isinstance(got[1][1], OSError)
    assert not writes.read(lambda: 1, lambda r, e: None)  # no loop runs


def _frozen(store: DiskCacheStore) -> Clock:
    clock = Clock()
    store._disk_keys._clock = clock
    return clock


def _counting_probes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    probes: list[str] = []
    real = disk_io.on_disk

    def counting(cache: diskcache.Cache, key: str) -> bool:
        probes.append(key)
        return real(cache, key)

    monkeypatch.setattr(store_module, "on_disk", counting)
    return probes


def test_the_store_skips_the_index_for_keys_never_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probes = _counting_probes(monkeypatch)
    a = DiskCacheStore(tmp_path / "c", size_limit_mb=8)
    b = DiskCacheStore(tmp_path / "c", size_limit_mb=8)  # another proxy process
    clock = _frozen(b)

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
        assert b.get("later") is None  # b's filter is from before: a miss, for now
        clock.now += TRUST_S + 0.01  # then b looks again before it trusts its filter
        assert b.get("later") == "0x02"
        await b.settled()
        probes.clear()
        assert b.get("nothing-3") is None and probes == []

    asyncio.run(scenario())
    a.close()
    b.close()


def test_the_store_never_hides_what_it_wrote_itself(tmp_path: Path) -> None:
    """An entry too large for the memory front, or evicted from it, is on
    disk only: the filter has it from the hand-off, with or without a loop."""
    store = DiskCacheStore(tmp_path / "c", size_limit_mb=8)
    _frozen(store)  # the filter stays trusted throughout
    big = "y" * (MEMO_MAX_VALUE_BYTES + 1)

    async def scenario() -> None:
        assert store.get("nothing") is None
        await store.settled()
        assert store._disk_keys.ready
        store.set("big", big)
        store.set("small", "0x01")
        store.flush()
        await store.settled()
        assert "big" not in store._writes.writing
        store._forget_memo()
        assert store.get("big") == big and store.get("small") == "0x01"

    asyncio.run(scenario())
    store.set("after-the-loop", big)  # no loop: written at once
    assert store.get("after-the-loop") == big
    store.close()
