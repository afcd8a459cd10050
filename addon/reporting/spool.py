"""Where usage batches wait until the sidecar accepts them.

* ``Spool``: on disk (``data_dir/spool``), a diskcache Index keyed by batch id,
  shared by the proxy processes of the machine, bounded by ``max_batches``
  (past it the oldest batch is dropped, counted and logged). Every disk or
  SQLite error (a full disk: ENOSPC, "database or disk is full") is raised as
  ``SpoolError``, so the shipper can tell "the spool failed" from anything
  else. A spool that cannot be opened (a proxy started on a full disk) is
  opened again at its next use.
* ``Backlog`` (pure): the batches the spool could not take, in memory, oldest
  first, bounded by count; past the bound the oldest is dropped and counted.
"""

from __future__ import annotations

import itertools
import logging
import sqlite3
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import diskcache

from common.usage_wire import calls_in

log = logging.getLogger("chainproxy.usage")

Batch = dict[str, Any]
_DISK_ERRORS = (sqlite3.Error, OSError, diskcache.Timeout)


class SpoolError(Exception):
    """The spool could not be opened, read or written."""


class Spool:
    """Bounded, ordered, on-disk, process-safe: diskcache Index keyed by batch id."""

    def __init__(self, directory: Path, *, max_batches: int) -> None:
        self.directory = directory
        self.max_batches = max_batches
        self.dropped = 0
        # Batches this process is delivering (read, sent, not yet answered): a
        # trim passes over them, so one the sidecar then takes was never lost
        # (a hung sidecar's backlog was "dropped" and then delivered, and
        # counted as lost). The bound is exceeded by these meanwhile.
        self.held: frozenset[str] = frozenset()
        self._index: diskcache.Index | None = None
        self._len = 0  # the last length read: a gauge must not fail with the disk
        try:
            self._open()
        except SpoolError as e:
            log.error("usage spool %s cannot be opened (%s); retried at its next use", directory, e)

    def _open(self) -> diskcache.Index:
        if self._index is None:
            try:
                self._index = diskcache.Index(str(self.directory))
            except _DISK_ERRORS as e:
                raise SpoolError(f"{type(e).__name__}: {e}") from e
        return self._index

    def __len__(self) -> int:
        try:
            self._len = len(self._open())
        except (SpoolError, *_DISK_ERRORS):
            pass
        return self._len

    def append(self, batch: Batch) -> int:
        """Store ``batch`` (``SpoolError`` if it could not be), then keep the
        bound; the calls of the batches dropped for it."""
        index = self._open()
        try:
            index[batch["batch_id"]] = batch
        except _DISK_ERRORS as e:
            raise SpoolError(f"{type(e).__name__}: {e}") from e
        try:
            return self._trim(index)
        except _DISK_ERRORS:
            return 0  # the batch is stored; the next append trims again

    def _trim(self, index: diskcache.Index) -> int:
        calls = 0
        over = len(index) - self.max_batches
        if over > 0 and self.held:  # the bound is for the batches no delivery holds
            over -= sum(1 for key in self.held if key in index)
        if over <= 0:
            return 0
        # the oldest first; a held one passed over (at most that many more read)
        for key in list(itertools.islice(index.keys(), over + len(self.held))):
            if over <= 0:
                break
            if key in self.held:
                continue
            dropped = index.pop(key, None)
            if dropped is None:
                continue  # delivered by another process meanwhile
            over -= 1
            self.dropped += 1
            calls += calls_in(dropped)
            log.error(
                "usage spool full (%d batches): dropped the oldest batch %s (%d calls)",
                self.max_batches,
                key,
                calls_in(dropped),
            )
        return calls

    def oldest(self, n: int) -> list[tuple[str, Batch]]:
        """Up to ``n`` batches, oldest first (``SpoolError`` if unreadable)."""
        index = self._open()
        out = []
        try:
            for key in index.keys():  # insertion order: oldest first
                try:
                    out.append((key, index[key]))
                except KeyError:  # another process delivered it meanwhile
                    continue
                if len(out) >= n:
                    break
        except _DISK_ERRORS as e:
            raise SpoolError(f"{type(e).__name__}: {e}") from e
        return out

    def remove(self, batch_id: str) -> None:
        """Forget a delivered batch (``SpoolError`` if the deletion failed)."""
        index = self._open()
        try:
            index.pop(batch_id, None)
        except _DISK_ERRORS as e:
            raise SpoolError(f"{type(e).__name__}: {e}") from e


class Backlog:
    """Batches the spool could not take, in memory, oldest first: at most
    ``max_batches``; past that the oldest is dropped and counted."""

    def __init__(self, max_batches: int) -> None:
        self.max_batches = max_batches
        self.dropped = 0  # batches
        self.dropped_calls = 0
        self._q: deque[Batch] = deque()

    def __len__(self) -> int:
        return len(self._q)

    def __iter__(self) -> Iterator[Batch]:
        return iter(list(self._q))  # a copy: the caller may remove while iterating

    def push(self, batch: Batch) -> Batch | None:
        """Keep ``batch`` (the newest); the batch dropped to stay bounded, if any."""
        self._q.append(batch)
        if len(self._q) <= self.max_batches:
            return None
        dropped = self._q.popleft()
        self.dropped += 1
        self.dropped_calls += calls_in(dropped)
        return dropped

    def first(self) -> Batch:
        return self._q[0]

    def remove(self, batch: Batch) -> None:
        """Forget ``batch`` (spooled or delivered); no error if it is gone already."""
        for i, b in enumerate(self._q):
            if b is batch:
                del self._q[i]
                return

    def calls(self) -> int:
        return sum(calls_in(b) for b in self._q)
