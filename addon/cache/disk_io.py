"""The edge cache's disk work off the event loop: every write goes to disk by
a thread of its own, many entries in one transaction; a key that is not on
disk is found so by one indexed query; large values are read back unparsed.

Why a thread, and why in batches (measured, docs/BENCHMARKS.md): a block-pinned
miss stored its answer on the loop, one or two entries a transaction, ~45 µs
of diskcache's CPU each (a transaction, then the size check of its eviction
on every ``set``), plus the commit's I/O between the node's answer and the
next client's. Written together, with eviction run once per batch
(``cull_limit=0`` on open, ``cull()`` after each batch), an entry costs ~17 µs;
SQLite's work releases the GIL, so the thread's share leaves the loop free.
A megabyte entry (a file of its own, 2-20 ms of wall time on a busy disk)
goes the same way. A batch commits in chunks (``CHUNK_ENTRIES``, ``CHUNK_BYTES``):
the loop's own disk work (an LRU hit writes its access time) waits for one
chunk at most, never for a whole batch.

Deletes go by the same thread, in order: a write handed on before a delete
lands before it, and a write after it lands after it, so no bookkeeping of
deleted keys is needed. Until an entry is on disk it is answered from
``writing``. A disk slower than the answers cannot grow ``writing`` without
bound: past ``MAX_WRITING_BYTES`` waiting, the store keeps no new batch
(``full``) until the thread catches up.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import diskcache

from addon.rpc.splice import RAW_MIN_BYTES, plain_string
from common.jsontext import RawJson, loads

Entry = tuple[str, str | None]  # JSON text, filler
MAX_WRITING_BYTES = 64 * 1_048_576  # of text handed to the thread, not yet on disk
CHUNK_ENTRIES = 64  # entries per transaction...
CHUNK_BYTES = 1_048_576  # ...and text per transaction (a larger entry: one of its own)
DELETE_TRIES = 10  # a delete that meets a lock (0.5 s each) is tried again this often

# diskcache keeps a ``str`` key as itself with ``raw = 1`` (``Disk.put``); the
# pair is its unique index, so a miss is one index probe instead of ``get``'s
# ~10 µs of Python (tests/addon/cache/test_disk_io.py holds diskcache to it).
_ON_DISK = "SELECT 1 FROM Cache WHERE key = ? AND raw = 1"


def on_disk(cache: diskcache.Cache, key: str) -> bool:
    """Whether ``key`` has a row (expired or not: ``get`` then decides)."""
    return cache._sql(_ON_DISK, (key,)).fetchone() is not None


def chunks(items: list[tuple[str, Entry]]) -> list[list[tuple[str, Entry]]]:
    """``items`` in transactions of at most ``CHUNK_ENTRIES`` and about ``CHUNK_BYTES``."""
    out: list[list[tuple[str, Entry]]] = []
    size = 0
    for item in items:
        if not out or len(out[-1]) >= CHUNK_ENTRIES or size >= CHUNK_BYTES:
            out.append([])
            size = 0
        out[-1].append(item)
        size += len(item[1][0])
    return out


# A text entry as ``Cache.set`` writes one kept in SQLite (``Disk.store``: size 0,
# mode raw, no file), all of a chunk in one statement: ~7.6 µs an entry instead
# of ``set``'s ~18 (a SELECT, then an INSERT or UPDATE, per entry). diskcache's
# triggers keep its count and size. A row whose value is a file (≥ 1 MiB,
# written by ``set``) is left as it is rather than leave its file behind: at a
# block hash an answer never changes, and a cross-check's delete goes first.
# SQLite's upsert is 3.24 or later (Debian 12 has 3.40); before it, ``set``.
_UPSERT = (
    "INSERT INTO Cache(key, raw, store_time, expire_time, access_time, access_count,"
    " tag, size, mode, filename, value) VALUES (?, 1, ?, NULL, ?, 0, ?, 0, ?, NULL, ?)"
    " ON CONFLICT(key, raw) DO UPDATE SET store_time = excluded.store_time,"
    " expire_time = NULL, access_time = excluded.access_time, access_count = 0,"
    " tag = excluded.tag, size = 0, mode = excluded.mode, value = excluded.value"
    " WHERE filename IS NULL"
)
UPSERT_WORKS = sqlite3.sqlite_version_info >= (3, 24, 0)


def write(cache: diskcache.Cache, items: Iterable[tuple[str, Entry]]) -> None:
    """Entries to disk, a chunk's texts in one transaction (a value of a file
    of its own by ``set``, after them), then the eviction of what exceeds the
    size limit (diskcache's Cache is thread-safe: in the writer thread, or at
    once where no loop runs)."""
    in_files = cache.disk.min_file_size if UPSERT_WORKS else 0
    for chunk in chunks(list(items)):
        large = [(k, e) for k, e in chunk if len(e[0]) >= in_files]
        now = time.time()
        rows = [
            (k, now, now, f, diskcache.core.MODE_RAW, t) for k, (t, f) in chunk if len(t) < in_files
        ]
        if rows:
            with cache.transact():
                cache._con.executemany(_UPSERT, rows)
        for key, (text, filler) in large:  # diskcache's way: a file of its own (or old SQLite)
            cache.set(key, text, tag=filler)
    try:
        cache.cull()  # automatic culling is off for this process: once per batch
    except diskcache.Timeout:
        pass  # another process holds the lock: the entries are written, the next batch culls


def delete(cache: diskcache.Cache, key: str) -> None:
    """``key`` off the disk; a lock another process holds is waited out a few
    times (a wrong answer left on disk would be served again)."""
    for attempt in range(DELETE_TRIES):
        try:
            cache.delete(key)
            return
        except diskcache.Timeout:
            if attempt == DELETE_TRIES - 1:
                raise


def value_of(text: str) -> Any:
    """A cached text as the value it stands for: a large plain string kept as
    its text (``RawJson``: spliced into the reply, never parsed), anything
    else parsed."""
    if len(text) >= RAW_MIN_BYTES and text[0] == '"':
        raw = text.encode()
        if plain_string(raw, written_here=True):
            return RawJson(raw)
    return loads(text)


Ended = Callable[[BaseException | None], None]
Then = Callable[[Any, BaseException | None], None]  # a job's result, or its error


class DiskWrites:
    """The writer thread, what it is writing, and the deletes queued behind."""

    def __init__(self) -> None:
        self.writing: dict[str, Entry] = {}
        # keys a delete is queued for, until the thread has done it: what the
        # disk still holds for them is not answered meanwhile (a cross-check
        # found it wrong)
        self.deleting: dict[str, int] = {}
        self.bytes = 0  # the text in ``writing``
        self._futures: set[asyncio.Future[None]] = set()
        self._executor: ThreadPoolExecutor | None = None

    def full(self) -> bool:
        """The thread is that far behind: the next batch is not kept..."""
        return self.bytes > MAX_WRITING_BYTES

    def caught_up(self) -> bool:
        """...until it is back under half of it (no flapping at the limit)."""
        return self.bytes <= MAX_WRITING_BYTES // 2

    def start(
        self,
        cache: diskcache.Cache,
        batch: dict[str, Entry],
        ended: Callable[[dict[str, Entry], BaseException | None], None],
    ) -> bool:
        """``batch`` handed to the thread (False: no loop runs, write it now);
        ``ended(batch, error)`` on the loop once written."""
        size = sum(len(text) for text, _ in batch.values())

        def written(error: BaseException | None) -> None:
            self.bytes -= size
            for key, item in batch.items():
                if self.writing.get(key) is item:
                    del self.writing[key]
            ended(batch, error)

        if not self._submit(functools.partial(write, cache, list(batch.items())), written):
            return False
        self.writing.update(batch)
        self.bytes += size
        return True

    def delete(self, cache: diskcache.Cache, key: str, ended: Ended) -> bool:
        """``key`` deleted by the thread, after every write handed on before
        (False: no loop runs, delete it now); ``ended(error)`` on the loop.
        Until then ``key`` is in ``deleting``."""

        def deleted(error: BaseException | None) -> None:
            left = self.deleting.pop(key, 1) - 1
            if left:
                self.deleting[key] = left
            ended(error)

        if not self._submit(functools.partial(delete, cache, key), deleted):
            return False
        self.deleting[key] = self.deleting.get(key, 0) + 1
        return True

    def read(self, job: Callable[[], Any], then: Then) -> bool:
        """``job`` run by the thread, after the writes handed on before it
        (False: no loop runs); ``then(its result, error)`` on the loop."""
        out: list[Any] = []
        return self._submit(
            lambda: out.append(job()), lambda error: then(out[0] if out else None, error)
        )

    def drop(self, key: str) -> None:
        """A delete: the entry being written is not answered from memory."""
        self.writing.pop(key, None)

    def _submit(self, job: Callable[[], None], ended: Ended) -> bool:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="chainproxy-cache")
        done = loop.run_in_executor(self._executor, job)
        self._futures.add(done)

        def finished(f: asyncio.Future[None]) -> None:
            self._futures.discard(f)
            # cancelled (the loop closing): not known to be on disk
            ended(asyncio.CancelledError() if f.cancelled() else f.exception())

        done.add_done_callback(finished)
        return True

    async def settled(self) -> None:
        """Until the jobs handed to the thread are done and reported. Never
        cancels them (``wait``, not ``gather``); each round yields, so the
        done callbacks run (3.12's ``gather`` of done futures does not)."""
        while self._futures:
            await asyncio.wait(set(self._futures))
            await asyncio.sleep(0)

    def close(self) -> None:
        """The jobs in flight end first."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
