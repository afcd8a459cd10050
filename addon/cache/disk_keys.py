"""Which keys the cache database may hold, known without asking it.

A read that misses the memory front asked SQLite's index every time (one
``SELECT``, ``disk_io.on_disk``): ~13 µs of the proxy's CPU and ~17 µs of
its loop under load, measured in the running proxy (docs/BENCHMARKS.md), on
nearly every miss of a cacheable call, nearly always to hear "no". This
keeps a Bloom filter (rbloom) of the keys written to the database, by this
process or by any other that shares it, and the index is asked only for a
key the filter may hold:

* this process's writes go in when they are handed on to be written
  (``handed``, with or without the writer thread), so they are in it before
  they leave ``writing``;
* while reads ask (at most every ``REFRESH_S``), the writer thread reads the
  rows added since it last looked, in ``rowid`` order (a new row takes the
  next rowid), which is how other processes' writes come in;
* at the first look, once the filter has taken more keys than it was sized
  for (an evicted or deleted key stays in it, so its false positives grow),
  and when the last row a look read is gone (SQLite then gives its rowid, or
  one below, to the next row written: a look from there would miss it), the
  thread builds a new filter from every key on disk, read from the key's
  index rather than the table.

The filter is used only while its last look was handed to the thread less
than ``TRUST_S`` ago (a quiet process asks the index, and looks). So another
process's entry is seen here at most ``TRUST_S`` after it is on disk (the
up-to-50 ms its own writer waits already made it a miss here); after the
rows at the end of the table were deleted, until the new filter is built,
every key is asked of the index. Each look is its own: one that comes back
after a newer one was handed on is dropped. Until the first look is done,
and after a rebuild failed, every key is asked of the index, as before. A
wrong "not there" would cost a miss (the node asked), never a wrong answer.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import diskcache
from rbloom import Bloom

from addon.cache.disk_io import Then

FALSE_POSITIVES = 0.01  # of keys never written, this share is still asked of the index
MIN_CAPACITY = 1 << 16
MAX_CAPACITY = 1 << 22  # to start with (~5 MB); a rebuild sizes it for what the disk holds
REFRESH_S = 0.05  # the rows other processes added are read at most this often...
TRUST_S = 0.1  # ...and a filter whose look was handed on longer ago than this is not used
RETRY_S = 1.0  # after a look that failed
LOST_S = 60.0  # a look not back by then never will be (its loop was closed): look again
FETCH_ROWS = 1000  # rows a fetch (the GIL is the loop's between them)

# diskcache's Cache table: ``rowid INTEGER PRIMARY KEY``; a ``str`` key is kept as
# itself with ``raw = 1``, unique with it in the index ``Cache_key_raw``, which holds
# the rowid too (tests/addon/cache/test_disk_keys.py holds diskcache to all three)
_ROWS_FROM = "SELECT rowid, key FROM Cache WHERE rowid >= ? AND raw = 1 ORDER BY rowid"
_LAST_ROW = "SELECT rowid, key FROM Cache WHERE raw = 1 ORDER BY rowid DESC LIMIT 1"
_ALL_KEYS = "SELECT key FROM Cache INDEXED BY Cache_key_raw WHERE raw = 1"

# a job for the writer thread, and what gets its result on the loop (False: no loop runs)
Submit = Callable[[Callable[[], object], Then], bool]
Row = tuple[int, str]  # rowid, key


@dataclass
class Look:
    """What the writer thread read."""

    last: Row | None  # the last row read (the next look starts there)
    keys: list[str]  # the keys of the rows after it (a look at new rows)...
    bloom: Bloom | None  # ...or a whole new filter (a rebuild)
    capacity: int
    rows: int  # keys read
    gone: bool = False  # the row a look started from was deleted: build a new filter


def read_rows(cache: diskcache.Cache, last: Row | None, capacity: int, rebuild: bool) -> Look:
    """In the writer thread: the keys of the rows after ``last``; for a rebuild,
    every key into a filter sized for at least twice what is on disk."""
    if rebuild:
        capacity = max(capacity, 2 * len(cache))  # diskcache's count (a settings row)
        bloom = Bloom(capacity, FALSE_POSITIVES)
        last = cache._sql(_LAST_ROW).fetchone()  # first: a row after it is read again
        rows = 0
        cursor = cache._sql(_ALL_KEYS)
        while batch := cursor.fetchmany(FETCH_ROWS):
            bloom.update([key for (key,) in batch])
            rows += len(batch)
        return Look(last, [], bloom, capacity, rows)
    keys: list[str] = []
    cursor = cache._sql(_ROWS_FROM, (last[0] if last else 0,))
    batch = cursor.fetchmany(FETCH_ROWS)
    if last is not None:
        # The row read last, read again: gone (or another row in its place), the
        # next row written may take its rowid or one below, which no look from
        # here would read.
        if not batch or tuple(batch[0]) != last:
            return Look(last, [], None, capacity, 0, gone=True)
        batch = batch[1:]
    while batch:
        last = tuple(batch[-1])
        keys.extend(key for _, key in batch)
        batch = cursor.fetchmany(FETCH_ROWS)
    return Look(last, keys, None, capacity, len(keys))


class DiskKeys:
    """The filter of one opened database, and the looks that keep it."""

    def __init__(
        self,
        capacity: int,
        submit: Submit,
        failed: Callable[[BaseException], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.capacity = min(max(MIN_CAPACITY, capacity), MAX_CAPACITY)
        self._submit = submit
        self._failed = failed  # a look that raised (counted and logged by the store)
        self._clock = clock
        self._cache: diskcache.Cache | None = None
        self._bloom = Bloom(self.capacity, FALSE_POSITIVES)
        self._keys = 0  # rows read into it since it was built
        self._last: Row | None = None
        self.ready = False  # False: every key is asked of the index
        self._look_id = 0  # the look out (or last): an older one coming back is dropped
        self._looking = False
        self._due = 0.0  # the next look, at the earliest
        self._submitted = 0.0  # when the look out was handed to the thread
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
        """Keys this process hands on to be written: on disk soon."""
        keys = list(keys)
        self._bloom.update(keys)  # counted when a look reads their rows
        if self._handed_meanwhile is not None:
            self._handed_meanwhile.extend(keys)

    def _start(self, cache: diskcache.Cache) -> None:
        self._cache = cache
        self._last = None
        self.ready = False
        self._looking = False
        self._due = self._trusted_until = 0.0

    def _look(self, cache: diskcache.Cache, now: float) -> None:
        rebuild = not self.ready or self._keys > self.capacity
        job = functools.partial(read_rows, cache, self._last, self.capacity, rebuild)
        self._look_id += 1
        self._looking, self._submitted, self._due = True, now, now + REFRESH_S
        meanwhile: list[str] | None = [] if rebuild else None
        self._handed_meanwhile = meanwhile
        then = functools.partial(self._looked, cache, self._look_id, now, meanwhile)
        try:
            submitted = self._submit(job, then)
        except RuntimeError:  # the executor or the loop going away
            submitted = False
        if not submitted:  # no loop runs (a tool): the index is asked
            self._looking = False
            self._handed_meanwhile = None
            self._due = now + RETRY_S

    def _looked(
        self,
        cache: diskcache.Cache,
        look_id: int,
        submitted: float,
        meanwhile: list[str] | None,
        look: Look | None,
        error: BaseException | None,
    ) -> None:
        if cache is not self._cache or look_id != self._look_id:
            return  # another database, or a newer look handed on since: that one counts
        self._looking = False
        self._handed_meanwhile = None
        if error is not None or look is None:
            self._failed(error or RuntimeError("no answer"))
            if meanwhile is not None:  # a rebuild: the filter is not known to be whole
                self.ready = False
            self._due = self._clock() + RETRY_S
            return
        if look.gone:
            self.ready = False  # every key asked of the index until the new filter
            return
        self._trusted_until = submitted + TRUST_S  # it read every row written before
        if look.bloom is not None:
            look.bloom.update(meanwhile or [])  # handed on after the thread read the disk
            self._bloom, self.capacity, self._keys = look.bloom, look.capacity, look.rows
            self.ready = True
        else:
            self._bloom.update(look.keys)
            self._keys += look.rows
        self._last = look.last
