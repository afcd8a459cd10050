"""Large cache entries off the event loop: written by a thread of their own,
read back as ``RawJson`` when they are a plain string.

diskcache writes an entry of a megabyte to a file of its own and SQLite: tens
of milliseconds of wall time on a busy disk that the loop, and every call
behind it, spent waiting. File and SQLite I/O release the GIL, so one writer
thread takes that wait off the loop. Until an entry is on disk it is answered
from ``writing``; deleted meanwhile, it is deleted again once written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import diskcache

from addon.rpc.splice import RAW_MIN_BYTES, plain_string
from common.jsontext import RawJson, loads

BIG_WRITE_BYTES = RAW_MIN_BYTES  # entries at least this large are written by the thread

Entry = tuple[str, str | None]  # JSON text, filler


def write(cache: diskcache.Cache, items: Iterable[tuple[str, Entry]]) -> None:
    """Entries to disk, several in one transaction (diskcache's Cache is
    thread-safe: on the loop, or in the writer thread)."""
    items = list(items)
    if len(items) == 1:
        ((key, (text, filler)),) = items
        cache.set(key, text, tag=filler)
        return
    with cache.transact():
        for key, (text, filler) in items:
            cache.set(key, text, tag=filler)


def value_of(text: str) -> Any:
    """A cached text as the value it stands for: a large plain string kept as
    its text (``RawJson``: spliced into the reply, never parsed), anything
    else parsed."""
    if len(text) >= RAW_MIN_BYTES and text[0] == '"':
        raw = text.encode()
        if plain_string(raw, written_here=True):
            return RawJson(raw)
    return loads(text)


class LargeWrites:
    """The writer thread and what it is writing."""

    def __init__(self) -> None:
        self.writing: dict[str, Entry] = {}
        self._dropped: set[str] = set()
        self._futures: set[asyncio.Future[None]] = set()
        self._executor: ThreadPoolExecutor | None = None

    def start(
        self,
        cache: diskcache.Cache,
        big: dict[str, Entry],
        ended: Callable[[dict[str, Entry], BaseException | None, set[str]], None],
    ) -> bool:
        """``big`` handed to the thread (False: no loop runs, write them now);
        ``ended(big, error, deleted meanwhile)`` on the loop once written."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="chainproxy-cache")
        self.writing.update(big)
        done = loop.run_in_executor(self._executor, write, cache, list(big.items()))
        self._futures.add(done)

        def written(f: asyncio.Future[None]) -> None:
            self._futures.discard(f)
            for key, item in big.items():
                if self.writing.get(key) is item:
                    del self.writing[key]
            dropped = self._dropped & big.keys()
            self._dropped -= dropped
            ended(big, None if f.cancelled() else f.exception(), dropped)

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
