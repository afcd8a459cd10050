"""The edge cache's storage: diskcache in ``data_dir/cache``, size-bounded with
LRU eviction, shared by every proxy process on the machine (SQLite). A corrupt,
unreadable or full cache is a miss and a counter (``on_error``), never an
error for the client; a failing store is logged when it starts failing and
when it works again. A corrupt database is set aside at start; one that cannot
be opened for another reason (a full disk) is left alone and opened later.

In front of the disk, each process keeps the most recently used entries in
memory (bounded by count and bytes): every cached answer is pinned to a block,
so a copy can never be stale. A memory hit costs a dict lookup and a JSON
decode instead of a SQLite read plus the LRU's write of the access time
(~100 µs); the disk's LRU order reflects the reads that missed the memory.

Each entry is tagged with the node that answered it (its *filler*: diskcache's
``tag``, indexed), so that every entry of a node a cross-check quarantined can
be purged (``purge``). A purge bumps a counter on disk: the machine's other
processes drop their memory front when they see it change (at most once a
second, on a read).

Disk work leaves the request's path (``addon/cache/disk_io.py``): ``set``
keeps the text in memory (the front, or ``_pending`` for a value too large
for it), and the writes of the next ``WRITE_EVERY_S`` (or ``WRITE_BATCH``
of them) go to disk together, by the writer thread; without a
running loop (a tool, a test) a write goes to disk at once. A read that misses
the memory asks the disk's index, unless the filter of the keys on disk says
it was never written (``addon/cache/disk_keys.py``).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import diskcache

from addon.cache.disk_io import DiskWrites, Entry, on_disk, value_of, write
from addon.cache.disk_io import delete as delete_now
from addon.cache.disk_keys import DiskKeys
from common.jsontext import dumps_text
from common.outage import Outage

log = logging.getLogger("chainproxy.cache")

_MISSING = object()
# The in-memory front: at most this many entries and bytes of JSON text; larger
# values (whole blocks can be big) are only kept on disk.
MEMO_MAX_ENTRIES = 4096
MEMO_MAX_BYTES = 16 * 1_048_576
MEMO_MAX_VALUE_BYTES = 256 * 1024
REOPEN_AFTER_S = 30.0  # a cache that could not be opened (a full disk) is tried again
PURGES_KEY = "chainproxy|purges"  # purges so far, on disk (not an entry's key: "v1|…")
PURGES_EVERY_S = 1.0  # a process looks whether another one purged at most this often
# Writes wait at most this long for the ones after them, to share a transaction
# (another process sees an entry that much later: it asks its node meanwhile)...
WRITE_EVERY_S = 0.05
WRITE_BATCH = 512  # ...or until this many wait


class CacheStore(Protocol):
    def get(self, key: str) -> Any | None: ...

    def set(self, key: str, value: Any, filler: str | None = None) -> None:
        """``filler``: the node that answered it (None: not known)."""

    def delete(self, key: str) -> None: ...

    async def purge(self, filler: str) -> int:
        """Forget every entry ``filler`` answered; how many there were."""

    def close(self) -> None:
        """What waits to be written is written (a stop, a reload): synchronous."""


def _is_corrupt(e: BaseException) -> bool:
    """ "file is not a database" / "malformed": a DatabaseError that is not an
    operational one (a full disk, I/O error, lock: the file itself is fine)."""
    return isinstance(e, sqlite3.DatabaseError) and not isinstance(e, sqlite3.OperationalError)


class DiskCacheStore:
    def __init__(
        self,
        directory: Path,
        *,
        size_limit_mb: int,
        reopen_after_s: float = REOPEN_AFTER_S,
        on_error: Callable[[str], None] | None = None,  # each failure, by operation (metrics)
    ) -> None:
        self.directory = directory
        self.errors = 0
        self._on_error = on_error
        self.reopen_after_s = reopen_after_s
        self._outage = Outage()
        self._size_limit = size_limit_mb * 1_048_576
        self._cache: diskcache.Cache | None = None
        self._next_open = 0.0
        self._memo: OrderedDict[str, tuple[str, str | None]] = OrderedDict()  # text, filler
        self._memo_bytes = 0
        self._purges: Any = None  # the disk's purge counter as last seen
        self._purges_due = 0.0
        self._pending: dict[str, tuple[str, str | None]] = {}  # handed to the thread at the flush
        self._flush_timer: asyncio.TimerHandle | None = None
        self._flush_loop: asyncio.AbstractEventLoop | None = None
        self._behind = Outage()  # batches not kept while the writer thread is behind
        self._writes = DiskWrites()  # the writer thread
        # which keys the disk may hold, so a miss skips the index (~256 bytes an entry at least)
        failed = lambda e: self._failed("keys", e)  # noqa: E731
        self._disk_keys = DiskKeys(self._size_limit // 256, self._writes.read, failed)
        try:
            self._cache = self._open()
        except Exception as e:
            if _is_corrupt(e):
                self._set_aside(e)
            else:  # a full disk at start: the cache is fine, opened again later
                self._failed("open", e)
                self._next_open = time.monotonic() + reopen_after_s

    def _set_aside(self, e: BaseException) -> None:
        """A corrupt database: set it aside and start empty."""
        directory = self.directory
        aside = directory.with_name(f"{directory.name}.corrupt-{int(time.time())}")
        log.error("cache at %s unreadable (%s); moved to %s", directory, e, aside.name)
        try:
            directory.rename(aside)
            self._cache = self._open()
        except Exception as e2:
            self._failed("open", e2)  # every lookup a miss until an open works
            self._next_open = time.monotonic() + self.reopen_after_s

    def _reopen(self) -> diskcache.Cache | None:
        """After an open that failed: try again, at most every ``reopen_after_s``."""
        now = time.monotonic()
        if now < self._next_open:
            return None
        self._next_open = now + self.reopen_after_s
        try:
            self._cache = self._open()
        except Exception as e:
            self._failed("open", e)
            return None
        self._worked()
        return self._cache

    def _open(self) -> diskcache.Cache:
        cache = diskcache.Cache(
            str(self.directory),
            size_limit=self._size_limit,
            eviction_policy="least-recently-used",
            # Values are small JSON texts; keep them in SQLite rather than files.
            disk_min_file_size=1 << 20,
            timeout=0.5,  # a locked database is a miss, not a stall
            tag_index=True,  # a node's entries found at once (``purge``)
        )
        # eviction once per batch written (disk_io.write), not on every set; for
        # this instance only: the database's own setting stays for other versions
        cache.reset("cull_limit", 0, update=False)
        return cache

    def _count(self, op: str) -> None:
        self.errors += 1
        if self._on_error is not None:
            self._on_error(op)

    def _failed(self, op: str, e: BaseException) -> None:
        self._count(op)
        if self._outage.failed():
            log.warning(
                "cache %s failed (%s: %s); treated as a miss until it works again",
                op,
                type(e).__name__,
                e,
            )

    def _worked(self) -> None:
        n = self._outage.ok()
        if n is not None:
            log.info("cache works again (%d failed operations while it did not)", n)

    def _remember(self, key: str, text: str, filler: str | None) -> None:
        if len(text) > MEMO_MAX_VALUE_BYTES:
            return
        old = self._memo.pop(key, None)
        if old is not None:
            self._memo_bytes -= len(old[0])
        self._memo[key] = (text, filler)
        self._memo_bytes += len(text)
        while len(self._memo) > MEMO_MAX_ENTRIES or self._memo_bytes > MEMO_MAX_BYTES:
            _, (dropped, _) = self._memo.popitem(last=False)
            self._memo_bytes -= len(dropped)

    def _forget_memo(self, filler: str | None = None) -> int:
        """The memory front's entries of ``filler`` (None: all) dropped; how many."""
        if filler is None:
            gone = len(self._memo)
            self._memo.clear()
        else:
            keys = [k for k, (_, f) in self._memo.items() if f == filler]
            for k in keys:
                del self._memo[k]
            gone = len(keys)
        self._memo_bytes = sum(len(t) for t, _ in self._memo.values())
        return gone

    def _check_purges(self, cache: diskcache.Cache) -> None:
        """At most every ``PURGES_EVERY_S``: another process purged a node's
        entries from the disk (the counter moved): the memory front may hold
        copies of them, so it starts again from the disk."""
        now = time.monotonic()
        if now < self._purges_due:
            return
        self._purges_due = now + PURGES_EVERY_S
        try:
            seen = cache.get(PURGES_KEY, default=0)
        except Exception:
            return  # the next read looks again
        if seen != self._purges:
            if self._purges is not None:
                self._forget_memo()
            self._purges = seen

    def get(self, key: str) -> Any | None:
        # Not ``self._cache or …``: an empty Cache is falsy, and its len() is a query.
        cache = self._cache if self._cache is not None else self._reopen()
        if cache is None:
            return None
        self._check_purges(cache)
        memo = self._memo.get(key)
        if memo is not None:
            self._memo.move_to_end(key)
            return value_of(memo[0])  # a fresh object per caller, like a disk read
        writes = self._writes
        pending = self._pending.get(key) or writes.writing.get(key)
        if pending is not None:  # larger than the front keeps, not on disk yet
            return value_of(pending[0])
        if key in writes.deleting:  # found wrong; the thread has not deleted it yet
            return None
        if not self._disk_keys.may_hold(cache, key):
            return None
        try:
            if not on_disk(cache, key):
                return None
            raw, filler = cache.get(key, default=_MISSING, tag=True)
        except Exception as e:  # corrupt db, disk error, lock timeout
            self._failed("read", e)
            return None
        if raw is _MISSING:
            return None  # proves nothing: on a full disk a miss is read, a hit fails (LRU write)
        if self._outage.failing:
            self._worked()
        try:
            value = value_of(raw)
        except (TypeError, ValueError) as e:
            self._failed("decode", e)
            return None
        if isinstance(raw, str):
            self._remember(key, raw, filler)
        return value

    def set(self, key: str, value: Any, filler: str | None = None) -> None:
        cache = self._cache if self._cache is not None else self._reopen()
        if cache is None:
            return
        text = dumps_text(value)
        self._remember(key, text, filler)
        self._pending[key] = (text, filler)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop: written now
            loop = None
        if loop is None or len(self._pending) >= WRITE_BATCH:
            self.flush()
        elif self._flush_timer is None or self._flush_loop is not loop:  # (a tool's next loop)
            self._flush_timer, self._flush_loop = loop.call_later(WRITE_EVERY_S, self.flush), loop

    def flush(self) -> None:
        """The writes made since the last flush, together (``disk_io.write``),
        by the writer thread when a loop runs (else now)."""
        if self._flush_timer is not None:
            self._flush_timer.cancel()
            self._flush_timer = None
        pending, self._pending = self._pending, {}
        cache = self._cache
        if not pending or cache is None:
            return
        writes = self._writes
        if writes.full() or (self._behind.failing and not writes.caught_up()):
            self._not_kept(pending)  # the disk is slower than the answers
            return
        if (n := self._behind.ok()) is not None:
            log.info("cache disk caught up; %d batch(es) were not kept meanwhile", n)
        self._disk_keys.handed(pending)  # before the thread can have written them
        if writes.start(cache, pending, self._wrote):
            return
        try:
            write(cache, pending.items())
        except Exception as e:  # full disk, lock timeout, removed directory
            self._wrote(pending, e)
            return
        self._wrote(pending, None)

    async def settled(self) -> None:
        """Until the writes handed to the writer thread are on disk (not those
        still pending: ``flush`` first)."""
        await self._writes.settled()

    def _wrote(self, items: dict[str, Entry], error: BaseException | None) -> None:
        if error is not None:
            self._failed("write", error)
            for key in items:  # not on disk: not answered from memory either
                self._forget_key(key)
        elif self._outage.failing:
            self._worked()

    def _not_kept(self, pending: dict[str, Entry]) -> None:
        """A batch while the writer thread is far behind: counted as a failed
        write, logged once until it catches up, not answered from memory."""
        self._count("write")
        if self._behind.failed():
            log.warning(
                "cache disk behind (%d MiB wait for it): new entries are not kept until"
                " it catches up",
                self._writes.bytes >> 20,
            )
        for key in pending:
            self._forget_key(key)

    def _forget_key(self, key: str) -> None:
        old = self._memo.pop(key, None)
        if old is not None:
            self._memo_bytes -= len(old[0])

    def delete(self, key: str) -> None:
        """Forget an entry (an answer a cross-check found wrong): in memory at
        once; on disk by the writer thread, after any write of it before."""
        self._forget_key(key)
        self._pending.pop(key, None)
        self._writes.drop(key)
        cache = self._cache
        if cache is None or self._writes.delete(cache, key, self._deleted):
            return
        try:
            delete_now(cache, key)
        except Exception as e:
            self._deleted(e)

    def _deleted(self, error: BaseException | None) -> None:
        if error is not None:
            self._failed("delete", error)

    async def purge(self, filler: str) -> int:
        """Every entry ``filler`` answered, gone from memory and disk (in a
        thread: a node may have filled many); the disk's purge counter moved,
        so the machine's other processes drop their memory fronts too. The
        entries the disk held (or, without a disk, the memory)."""
        self.flush()  # writes still pending go to disk first, tagged: evicted below
        await self.settled()
        in_memory = self._forget_memo(filler)
        cache = self._cache
        if cache is None:
            return in_memory
        try:
            gone, purges = await asyncio.to_thread(_evict, cache, filler)
        except Exception as e:
            self._failed("purge", e)
            return in_memory
        self._purges = purges  # this process's own purge: its memory is clean
        self._forget_memo(filler)  # read back from the disk while the thread ran
        return gone

    def close(self) -> None:
        if self._cache is None:
            return
        self.flush()
        self._writes.close()  # the writes in flight end first
        try:
            self._cache.close()
        except Exception as e:
            self._failed("close", e)


def _evict(cache: diskcache.Cache, filler: str) -> tuple[int, Any]:
    """(In a thread.) The entries tagged ``filler`` deleted, and the purge
    counter moved: (how many, the counter now)."""
    gone = cache.evict(filler, retry=True)
    return gone, cache.incr(PURGES_KEY, default=0, retry=True)
