"""Which keys the cache database may hold, known without asking it.

A read that misses the memory front asked SQLite's index every time (one
``SELECT``, ``disk_io.on_disk``): ~13 µs of the proxy's CPU and ~17 µs of
its loop under load, measured in the running proxy (docs/BENCHMARKS.md), on
nearly every miss of a cacheable call, nearly always to hear "no". This
keeps a Bloom filter (rbloom) of the keys written to the database, by this
process or by any other that shares it, and the index is asked only for a
key the filter may hold:

* this process's writes go in as they are handed to the writer thread
  (``handed``), so they are in it before they leave ``writing``;
* while reads ask (at most every ``REFRESH_S``), the writer thread reads the
  rows added since it last looked, in ``rowid`` order (a new row takes the
  next rowid), which is how other processes' writes come in;
* at the first look, and once the filter has taken more keys than it was
  sized for (an evicted or deleted key stays in it, so its false positives
  grow), the thread builds a new filter from every key on disk.

The filter is used only while its last look began less than ``TRUST_S``
ago (a quiet process asks the index, and looks). So another process's entry
is seen here at most ``TRUST_S`` after it is on disk: the up-to-50 ms its own
writer waits already made it a miss here. One more way to be wrong, costing a
miss (the node is asked), never a wrong answer: a row that took a rowid
below the last one read (SQLite gives the largest rowid again after that
row is deleted; a look starts at the last rowid read, so only a reuse
further back is missed). Until the first look is done, and after a look
failed, every key is asked of the index, as before.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import diskcache
from rbloom import Bloom

log = logging.getLogger("chainproxy.cache")

FALSE_POSITIVES = 0.01  # of keys never written, this share is still asked of the index
MIN_CAPACITY = 1 << 16
MAX_CAPACITY = 1 << 22  # to start with (~5 MB); a rebuild sizes it for what the disk holds
REFRESH_S = 0.05  # the rows other processes added are read at most this often...
TRUST_S = 0.1  # ...and a filter whose look began longer ago than this is not used
RETRY_S = 1.0  # after a look that failed
LOST_S = 60.0  # a look not back by then never will be (its loop was closed): look again
FETCH_ROWS = 1000  # rows a fetch when reading the disk's keys (the thread yields between)

# diskcache's Cache table: ``rowid INTEGER PRIMARY KEY``; a ``str`` key is kept
# as itself with ``raw = 1`` (tests/addon/cache/test_disk_keys.py holds it to that)
_ROWS_FROM = "SELECT rowid, key FROM Cache WHERE rowid >= ? AND raw = 1 ORDER BY rowid"

Then = Callable[[Any, BaseException | None], None]
Submit = Callable[[Callable[[], Any], Then], bool]  # a job for the writer thread (False: no loop)


@dataclass
class Look:
    """What the writer thread read: the rows from a rowid on."""

    after: int  # the last rowid read (the next look starts there)
    keys: list[str]  # their keys (a look at new rows)
    bloom: Bloom | None  # or a whole new filter (a rebuild)
    capacity: int
    rows: int


def read_rows(cache: diskcache.Cache, after: int, capacity: int, rebuild: bool) -> Look:
    """In the writer thread: the keys of the rows from rowid ``after`` on; for a
    rebuild, all of them into a filter sized for at least twice what is on disk."""
    bloom = None
    if rebuild:
        capacity = max(capacity, 2 * len(cache))  # diskcache's count (a settings row)
        bloom = Bloom(capacity, FALSE_POSITIVES)
    keys: list[str] = []
    rows = 0
    cursor = cache._sql(_ROWS_FROM, (after,))
    while batch := cursor.fetchmany(FETCH_ROWS):
        rows += len(batch)
        after = batch[-1][0]
        found = [key for _, key in batch]
        if bloom is not None:
            bloom.update(found)
        else:
            keys.extend(found)
    return Look(after, keys, bloom, capacity, rows)


class DiskKeys:
    """The filter of one opened database, and the looks that keep it."""

    def __init__(
        self, capacity: int, submit: Submit, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.capacity = min(max(MIN_CAPACITY, capacity), MAX_CAPACITY)
        self._submit = submit
        self._clock = clock
        self._cache: diskcache.Cache | None = None
        self._bloom = Bloom(self.capacity, FALSE_POSITIVES)
        self._keys = 0  # rows read into it since it was built
        self._after = 0
        self.ready = False  # False: every key is asked of the index
        self._looking = False
        self._due = 0.0  # the next look, at the earliest
        self._submitted = 0.0  # when the last look was handed to the thread
        self._trusted_until = 0.0
        self._handed_meanwhile: list[str] | None = None  # while a new filter is built

    def may_hold(self, cache: diskcache.Cache, key: str) -> bool:
        """False: ``key`` is not on disk (as far as the last look saw)."""
        if cache is not self._cache:  # opened again (set aside, reopened): start over
            self._start(cache)
        now = self._clock()
        if now >= self._due and (not self._looking or now - self._submitted > LOST_S):
            self._look(cache, now)
        if not self.ready or now > self._trusted_until:
            return True  # not looked lately (a quiet process): ask the index
        return key in self._bloom

    def handed(self, keys: Iterable[str]) -> None:
        """Keys this process hands to the writer thread: on disk soon."""
        keys = list(keys)
        self._bloom.update(keys)  # counted when a look reads their rows
        if self._handed_meanwhile is not None:
            self._handed_meanwhile.extend(keys)

    def _start(self, cache: diskcache.Cache) -> None:
        self._cache = cache
        self._after = 0
        self.ready = False
        self._due = self._trusted_until = 0.0

    def _look(self, cache: diskcache.Cache, now: float) -> None:
        rebuild = not self.ready or self._keys > self.capacity
        after = 0 if rebuild else self._after  # a new filter: every row
        job = functools.partial(read_rows, cache, after, self.capacity, rebuild)
        self._looking, self._submitted, self._due = True, now, now + REFRESH_S
        if rebuild:
            self._handed_meanwhile = []
        if not self._submit(job, functools.partial(self._looked, cache, rebuild)):
            self._looking = False  # no loop runs (a tool): the index is asked
            self._handed_meanwhile = None
            self._due = self._clock() + RETRY_S

    def _looked(
        self, cache: diskcache.Cache, rebuild: bool, look: Look | None, error: BaseException | None
    ) -> None:
        self._looking = False
        meanwhile, self._handed_meanwhile = self._handed_meanwhile, None
        if cache is not self._cache:
            return  # another database since: its own look comes
        if error is not None or look is None:
            if self.ready:
                log.warning(
                    "reading the cache's keys failed (%s); asking its index meanwhile", error
                )
            self.ready = False
            self._due = self._clock() + RETRY_S
            return
        # it read every row written before it was handed on
        self._trusted_until = self._submitted + TRUST_S
        if rebuild:
            assert look.bloom is not None
            look.bloom.update(meanwhile or [])  # handed on after the thread read the disk
            self._bloom, self.capacity, self._keys = look.bloom, look.capacity, look.rows
            self.ready = True
        else:
            self._bloom.update(look.keys)
            self._keys += len(look.keys)
        self._after = look.after
