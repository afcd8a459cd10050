"""SQLite storage of the usage rollups: ``data_dir/usage.sqlite3`` (WAL).

The tables and statements are in ``sidecar.usage.sql``; the conversions
between rows and values in ``sidecar.usage.rows``. Every ingest updates all
tables in one transaction (all or nothing; a batch id already seen changes
nothing).

Reading: merging 7 days of histograms on every request is too slow in Python
(~350 hourly histograms of a few hundred buckets each is ~200 ms), so the
store keeps the window's totals in memory — counts per (network, endpoint)
and one merged histogram per network — as a sliding window: an ingest adds
its batch after the commit; when the window's start moves on, the minutes
that leave it are read back (``usage_minute`` counts, ``hist_minute``) and
subtracted. A summary is then a copy of a few small dicts. The totals are
(re)built from the database at start-up, after an error, when the clock
moves backwards or after a long pause (whole hours from the hourly tables,
the hour cut by the window's start from the minute tables).

Rollups older than the window are dropped on ingest and pruned (every
``prune_interval_s`` of ingest time, and by the caller's timer), always after
the in-memory window moved past them. SQLite or disk errors are counted and
raised as ``StoreUnavailable`` (the API answers 503, the addon keeps the
batch); they are logged once when the store starts failing and once when an
ingest works again (a full disk fails every batch until space is freed, while
the in-memory totals keep serving reads).

The store is synchronous and thread-safe (one lock around the connection and
the totals), so the API runs it off the event loop with ``asyncio.to_thread``.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.outage import Outage
from sidecar.db import open_db
from sidecar.usage import sql
from sidecar.usage.rows import batch_rows, hist_merge, read_totals
from sidecar.usage.stats.batch import Batch
from sidecar.usage.stats.window import WINDOW_S, WindowTotals, window_start_minute

log = logging.getLogger("chainproxy.sidecar.usage")

BATCH_RETENTION_S = WINDOW_S + 86_400
MAX_SLIDE_MINUTES = 180  # a longer jump of the window's start rebuilds the totals instead


class StoreUnavailable(RuntimeError):
    """The database could not be read or written (locked, disk full, corrupt)."""


@dataclass(frozen=True, slots=True)
class IngestResult:
    duplicate: bool
    rollups: int  # in the batch
    stored: int  # of those, stored: older than the window or empty ones are dropped


def _first_full_hour(start: int) -> int:
    return -(-start // 60)


class UsageStore:
    def __init__(
        self,
        path: Path,
        *,
        window_s: int = WINDOW_S,
        batch_retention_s: float = BATCH_RETENTION_S,
        prune_interval_s: float = 600.0,
        busy_timeout_ms: int = 2000,
    ) -> None:
        self.path = path
        self.window_s = window_s
        self.batch_retention_s = batch_retention_s
        self.prune_interval_s = prune_interval_s
        self.errors = 0
        self._outage = Outage()
        self.rebuilds = 0  # times the in-memory totals were rebuilt from the database
        self.updated: float | None = None
        self._next_prune = float("-inf")
        self._lock = threading.Lock()
        self._totals: WindowTotals | None = None  # the window starting at _start
        self._start = 0
        db: sqlite3.Connection | None = None
        try:
            # 16 MiB of page cache: the hot B-tree pages of a week of rollups.
            db = open_db(path, sql.SCHEMA, busy_timeout_ms=busy_timeout_ms, cache_kib=16384)
            db.create_function("hist_merge", 2, hist_merge, deterministic=True)
            row = db.execute("SELECT value FROM usage_meta WHERE key = 'updated'").fetchone()
        except (sqlite3.Error, OSError) as e:
            self.errors += 1
            if db is not None:
                db.close()
            log.error("usage store %s cannot be opened (%s): %s", path, type(e).__name__, e)
            raise StoreUnavailable(f"usage store cannot be opened: {e}") from e
        self._db = db
        if row is not None:
            try:
                self.updated = float(row[0])
            except ValueError:
                log.warning("ignoring an unreadable usage 'updated' value %r", row[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _fail(self, what: str, e: Exception) -> StoreUnavailable:
        self.errors += 1
        if self._outage.failed():  # once, not once per batch: a full disk fails them all
            log.error(
                "usage %s failed (%s): %s; answering 503 until it works again",
                what,
                type(e).__name__,
                e,
            )
        return StoreUnavailable(f"usage store {what} failed: {e}")

    def _worked(self) -> None:
        """A batch was stored: the only proof that writing works again (a read
        or an empty prune works on a full disk too)."""
        n = self._outage.ok()
        if n is not None:
            log.warning("usage store works again (%d failed operations while it did not)", n)

    # --- the in-memory window (call with the lock held) -------------------------------------

    def _advance(self, now: float) -> int:
        """Move the in-memory totals to the window ending at ``now``; its start."""
        start = window_start_minute(now, self.window_s)
        totals, self._totals = self._totals, None  # stays None if reading fails
        if totals is None or start < self._start or start - self._start > MAX_SLIDE_MINUTES:
            first_hour = _first_full_hour(start)
            edge = (start, first_hour * 60)
            totals = read_totals(
                self._db.execute(sql.WINDOW_COUNTS, (first_hour, *edge)),
                self._db.execute(sql.MINUTE_HISTS, edge),
            )
            for net, b, n in self._db.execute(sql.HOUR_HISTS, (first_hour,)):
                h = totals.hists.setdefault(net, {})
                h[b] = h.get(b, 0) + n
            self.rebuilds += 1
        elif start > self._start:
            leaving = (self._start, start)
            totals.subtract(
                read_totals(
                    self._db.execute(sql.MINUTE_COUNTS, leaving),
                    self._db.execute(sql.MINUTE_HISTS, leaving),
                )
            )
        self._totals, self._start = totals, start
        return start

    # --- writing ---------------------------------------------------------------------------

    def ingest(self, batch: Batch, now: float) -> IngestResult:
        """Merge a validated batch in one transaction; a known batch id is a no-op.
        Rollups older than the window ending at ``now`` are dropped."""
        rows = batch_rows(batch, window_start_minute(now, self.window_s), math.floor(now / 60))
        # Encoded before taking the lock: the transaction only writes.
        upserts = (
            (sql.UPSERT_MINUTE, rows.minute_rows()),
            (sql.UPSERT_HOUR, rows.hour_rows()),
            (sql.UPSERT_METHOD_HOUR, rows.method_hour_rows()),
            (sql.UPSERT_HIST_MINUTE, rows.minute_hist_rows()),
            (sql.UPSERT_HIST_HOUR, rows.hour_hist_rows()),
        )

        with self._lock:
            db = self._db
            try:
                self._advance(now)
                db.execute("BEGIN IMMEDIATE")
                try:
                    seen = db.execute(
                        "SELECT 1 FROM usage_batches WHERE batch_id = ?", (batch.batch_id,)
                    ).fetchone()
                    if seen:
                        db.execute("ROLLBACK")
                        return IngestResult(True, len(batch.rollups), 0)
                    db.execute(
                        "INSERT INTO usage_batches (batch_id, received) VALUES (?, ?)",
                        (batch.batch_id, now),
                    )
                    for statement, args in upserts:
                        db.executemany(statement, args)
                    db.execute(
                        "INSERT INTO usage_meta (key, value) VALUES ('updated', ?)"
                        " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                        (repr(float(now)),),
                    )
                    db.execute("COMMIT")
                except BaseException:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
            except (sqlite3.Error, OSError) as e:
                raise self._fail("ingest", e) from e
            self.updated = now
            if self._outage.failing:
                self._worked()
            if self._totals is not None:
                rows.add_to(self._totals)
        if now >= self._next_prune:
            self.prune(now)
        return IngestResult(False, len(batch.rollups), rows.stored)

    def prune(self, now: float) -> int:
        """Delete rollups older than the window and batch ids older than the
        retention; returns the rows removed (0 after logging on an error)."""
        self._next_prune = now + self.prune_interval_s
        with self._lock:
            try:
                start = self._advance(now)  # subtract what leaves before deleting it
                # The hour cut by the window's start is read from the minute tables;
                # its hourly rows are not needed any more, but keep them one more hour.
                old_hour = start // 60
                with self._db:
                    self._db.execute("BEGIN IMMEDIATE")
                    removed = 0
                    for sql, arg in (
                        ("DELETE FROM usage_minute WHERE minute < ?", start),
                        ("DELETE FROM hist_minute WHERE minute < ?", start),
                        ("DELETE FROM usage_hour WHERE hour < ?", old_hour),
                        ("DELETE FROM hist_hour WHERE hour < ?", old_hour),
                        ("DELETE FROM usage_method_hour WHERE hour < ?", old_hour),
                        (
                            "DELETE FROM usage_batches WHERE received < ?",
                            now - self.batch_retention_s,
                        ),
                    ):
                        removed += self._db.execute(sql, (arg,)).rowcount
            except (sqlite3.Error, OSError) as e:
                self._fail("prune", e)
                return 0
        return removed

    def tick(self, now: float) -> None:
        """Timer work: keep the in-memory window current and prune when due."""
        if now >= self._next_prune:
            self.prune(now)
            return
        with self._lock:
            try:
                self._advance(now)
            except (sqlite3.Error, OSError) as e:
                self._fail("read", e)

    # --- reading ---------------------------------------------------------------------------

    def window_totals(self, now: float) -> WindowTotals:
        """Counts per (network, endpoint) and a merged histogram per network over
        the window ending at ``now`` (a copy: the caller may keep it)."""
        return self._totals_copy(now, rebuild=False)

    def rebuild_totals(self, now: float) -> WindowTotals:
        """The window totals read from the database alone (checks the in-memory ones)."""
        return self._totals_copy(now, rebuild=True)

    def _totals_copy(self, now: float, *, rebuild: bool) -> WindowTotals:
        with self._lock:
            if rebuild:
                self._totals = None
            try:
                self._advance(now)
            except (sqlite3.Error, OSError) as e:
                raise self._fail("read", e) from e
            assert self._totals is not None
            return self._totals.copy()

    def hourly_requests(self, now: float, network: str | None = None) -> list[tuple[int, int]]:
        """(hour, requests) for the hours of the window that saw traffic, oldest
        first; ``hour`` = floor(unix time / 3600). For the dashboard's chart."""
        return [(int(h), int(n)) for h, n in self._hourly("SUM(requests)", now, network)]

    def hourly_series(self, now: float, network: str | None = None) -> list[tuple[Any, ...]]:
        """(hour, requests, errors, cache_hits, latency_ms_sum) for the hours of the
        window that saw traffic, oldest first (the 7-day pictures, ``/rpc/usage``)."""
        sums = "SUM(requests), SUM(errors), SUM(cache_hits), SUM(latency_ms_sum)"
        return self._hourly(sums, now, network)

    def top_methods(
        self, now: float, network: str | None = None, limit: int = 10
    ) -> tuple[list[tuple[str, int, int]], int]:
        """(method, requests, units) of the methods that cost the most units over
        the window's whole hours (then the most requests), at most ``limit``;
        and the units of all methods over those hours."""
        start = (int(now) - self.window_s) // 3600
        where, args = "hour >= ?", list[Any]([start])
        if network is not None:
            where += " AND network = ?"
            args.append(network)
        query = (
            f"SELECT method, SUM(requests), SUM(units) FROM usage_method_hour WHERE {where}"
            " GROUP BY method ORDER BY SUM(units) DESC, SUM(requests) DESC, method LIMIT ?"
        )
        total = f"SELECT COALESCE(SUM(units), 0) FROM usage_method_hour WHERE {where}"
        with self._lock:
            try:
                rows = self._db.execute(query, [*args, limit]).fetchall()
                units = self._db.execute(total, args).fetchone()[0]
            except (sqlite3.Error, OSError) as e:
                raise self._fail("methods read", e) from e
        return [(str(m), int(n), int(u)) for m, n, u in rows], int(units)

    def _hourly(self, sums: str, now: float, network: str | None) -> list[tuple[Any, ...]]:
        """(hour, *sums) per hour of the window, oldest first (``sums``: SQL of
        ours, over columns both tables have). The hour the window's start cuts
        is read from the minute table, its minutes inside the window only, so
        the hours add up to the window's totals (the KPIs)."""
        start = window_start_minute(now, self.window_s)
        cut = start // 60  # the hour holding the window's first minute
        on = " AND network = ?" if network is not None else ""
        tail: list[Any] = [network] if network is not None else []
        first = f"SELECT COUNT(*), {sums} FROM usage_minute WHERE minute >= ? AND minute < ?{on}"
        rest = f"SELECT hour, {sums} FROM usage_hour WHERE hour > ?{on} GROUP BY hour ORDER BY hour"
        with self._lock:
            try:
                n, *cut_sums = self._db.execute(first, [start, (cut + 1) * 60, *tail]).fetchone()
                hours = [tuple(r) for r in self._db.execute(rest, [cut, *tail])]
            except sqlite3.Error as e:
                raise self._fail("hourly read", e) from e
        return [(cut, *cut_sums), *hours] if n else hours

    def row_counts(self) -> dict[str, int]:
        with self._lock:
            return {
                t: self._db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                for t in (
                    "usage_minute",
                    "hist_minute",
                    "usage_hour",
                    "hist_hour",
                    "usage_method_hour",
                    "usage_batches",
                )
            }
