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
goes the same way. Until an entry is on disk it is answered from ``writing``;
deleted meanwhile, it is deleted again once written. A disk slower than the
answers arrive cannot grow ``writing`` without bound: past
``MAX_WRITING_BYTES`` handed to the thread and not yet written, a batch is
not written at all (``start`` says so; the store counts and logs it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import diskcache

from addon.rpc.splice import RAW_MIN_BYTES, plain_string
from common.jsontext import RawJson, loads

Entry = tuple[str, str | None]  # JSON text, filler
MAX_WRITING_BYTES = 64 * 1_048_576  # of text handed to the thread, not yet on disk

# diskcache keeps a ``str`` key as itself with ``raw = 1`` (``Disk.put``); the
# pair is its unique index, so a miss is one index probe instead of ``get``'s
# ~10 µs of Python (tests/addon/cache/test_disk_io.py holds diskcache to it).
_ON_DISK = "SELECT 1 FROM Cache WHERE key = ? AND raw = 1"


def on_disk(cache: diskcache.Cache, key: str) -> bool:
    """Whether ``key`` has a row (expired or not: ``get`` then decides)."""
    return cache._sql(_ON_DISK, (key,)).fetchone() is not None


def write(cache: diskcache.Cache, items: Iterable[tuple[str, Entry]]) -> None:
    """Entries to disk in one transaction, then the eviction of what exceeds
    the size limit (diskcache's Cache is thread-safe: in the writer thread,
    or at once where no loop runs)."""
    items = list(items)
    if len(items) == 1:
        ((key, (text, filler)),) = items
        cache.set(key, text, tag=filler)
    else:
        with cache.transact():
            for key, (text, filler) in items:
                cache.set(key, text, tag=filler)
    try:
        cache.cull()  # automatic culling is off (``cull_limit=0``): once per batch
    except diskcache.Timeout:
        pass  # another process holds the lock: the entries are written, the next batch culls


def value_of(text: str) -> Any:
    """A cached text as the value it stands for: a large plain string kept as
    its text (``RawJson``: spliced into the reply, never parsed), anything
    else parsed."""
    if len(text) >= RAW_MIN_BYTES and text[0] == '"':
        raw = text.encode()
        if plain_string(raw, written_here=True):
            return RawJson(raw)
    return loads(text)


class DiskWrites:
    """The writer thread and what it is writing."""

    def __init__(self) -> None:
        self.writing: dict[str, Entry] = {}
        self._dropped: set[str] = set()
        self._futures: set[asyncio.Future[None]] = set()
        self._executor: ThreadPoolExecutor | None = None
        self.bytes = 0  # the text in ``writing``

    def full(self) -> bool:
        """The thread is that far behind: the next batch is not written."""
        return self.bytes > MAX_WRITING_BYTES

    def start(
        self,
        cache: diskcache.Cache,
        batch: dict[str, Entry],
        ended: Callable[[dict[str, Entry], BaseException | None, set[str]], None],
    ) -> bool:
        """``batch`` handed to the thread (False: no loop runs, write it now);
        ``ended(batch, error, deleted meanwhile)`` on the loop once written."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="chainproxy-cache")
        self.writing.update(batch)
        size = sum(len(text) for text, _ in batch.values())
        self.bytes += size
        done = loop.run_in_executor(self._executor, write, cache, list(batch.items()))
        self._futures.add(done)

        def written(f: asyncio.Future[None]) -> None:
            self._futures.discard(f)
            self.bytes -= size
            for key, item in batch.items():
                if self.writing.get(key) is item:
                    del self.writing[key]
            dropped = self._dropped & batch.keys()
            self._dropped -= dropped
            ended(batch, None if f.cancelled() else f.exception(), dropped)

        done.add_done_callback(written)
        return True

    def drop(self, key: str) -> None:
        """A delete: not answered from memory, and deleted again once written."""
        if self.writing.pop(key, None) is not None:
            self._dropped.add(key)

    async def settled(self) -> None:
        """Until the writes in flight are on disk."""
        while self._futures:
            await asyncio.gather(*self._futures, return_exceptions=True)

    def close(self) -> None:
        """The writes in flight end first."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
