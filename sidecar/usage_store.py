"""SQLite storage of the usage rollups: ``data_dir/usage.sqlite3`` (WAL).

Tables (all ``WITHOUT ROWID``, keyed so that storage grows with the number of
distinct keys, never with the number of calls):

* ``usage_minute`` — the rollups as received, merged per
  ``(minute, network, endpoint or '', method)``: counts, latency sum and the
  latency histogram as a flat JSON array (``[195,4,230,6]``, see ``hist_json``).
* ``hist_minute`` — one merged histogram per ``(minute, network)``.
* ``usage_hour`` / ``hist_hour`` — counts per ``(hour, network, endpoint)`` and
  the histogram per ``(hour, network)``, one row per bucket (merged by SQL
  alone: rewriting a histogram of hundreds of buckets on every batch is slow).
* ``usage_batches`` — the batch ids seen (idempotency), kept 8 days.
* ``usage_meta`` — ``updated``: the time of the last successful ingest.

Every ingest updates all of them in one transaction (all or nothing; a batch
id already seen changes nothing).

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
the in-memory window moved past them. SQLite or disk errors are logged,
counted and raised as ``StoreUnavailable`` (the API answers 503, the addon
keeps the batch).

The store is synchronous and thread-safe (one lock around the connection and
the totals), so the API runs it off the event loop with ``asyncio.to_thread``.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common.latency_hist import Hist
from sidecar.db import open_db
from sidecar.stats.batch import Batch
from sidecar.stats.window import WINDOW_S, Counts, WindowTotals, window_start_minute

log = logging.getLogger("chainproxy.sidecar.usage")

BATCH_RETENTION_S = WINDOW_S + 86_400
MAX_SLIDE_MINUTES = 180  # a longer jump of the window's start rebuilds the totals instead

_SCHEMA = """
CREATE TABLE IF NOT EXISTS usage_minute (
    minute INTEGER NOT NULL,
    network TEXT NOT NULL,
    endpoint TEXT NOT NULL,
    method TEXT NOT NULL,
    requests INTEGER NOT NULL,
    errors INTEGER NOT NULL,
    failovers INTEGER NOT NULL,
    cache_hits INTEGER NOT NULL,
    latency_ms_sum REAL NOT NULL,
    hist TEXT NOT NULL,
    PRIMARY KEY (minute, network, endpoint, method)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS hist_minute (
    minute INTEGER NOT NULL,
    network TEXT NOT NULL,
    hist TEXT NOT NULL,
    PRIMARY KEY (minute, network)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS usage_hour (
    hour INTEGER NOT NULL,
    network TEXT NOT NULL,
    endpoint TEXT NOT NULL,
    requests INTEGER NOT NULL,
    errors INTEGER NOT NULL,
    failovers INTEGER NOT NULL,
    cache_hits INTEGER NOT NULL,
    latency_ms_sum REAL NOT NULL,
    PRIMARY KEY (hour, network, endpoint)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS hist_hour (
    hour INTEGER NOT NULL,
    network TEXT NOT NULL,
    bucket INTEGER NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (hour, network, bucket)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS usage_batches (
    batch_id TEXT PRIMARY KEY,
    received REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS usage_batches_received ON usage_batches (received);
CREATE TABLE IF NOT EXISTS usage_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
"""

_COUNT_SUMS = """
    requests = requests + excluded.requests,
    errors = errors + excluded.errors,
    failovers = failovers + excluded.failovers,
    cache_hits = cache_hits + excluded.cache_hits,
    latency_ms_sum = latency_ms_sum + excluded.latency_ms_sum"""
_UPSERT_MINUTE = f"""
INSERT INTO usage_minute (minute, network, endpoint, method, requests, errors, failovers,
                          cache_hits, latency_ms_sum, hist)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (minute, network, endpoint, method) DO UPDATE SET {_COUNT_SUMS},
    hist = hist_merge(hist, excluded.hist)
"""
_UPSERT_HOUR = f"""
INSERT INTO usage_hour (hour, network, endpoint, requests, errors, failovers, cache_hits,
                        latency_ms_sum)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (hour, network, endpoint) DO UPDATE SET {_COUNT_SUMS}
"""
_UPSERT_HIST_MINUTE = """
INSERT INTO hist_minute (minute, network, hist) VALUES (?, ?, ?)
ON CONFLICT (minute, network) DO UPDATE SET hist = hist_merge(hist, excluded.hist)
"""
_UPSERT_HIST_HOUR = """
INSERT INTO hist_hour (hour, network, bucket, count) VALUES (?, ?, ?, ?)
ON CONFLICT (hour, network, bucket) DO UPDATE SET count = count + excluded.count
"""
_SUMS = "SUM(requests), SUM(errors), SUM(failovers), SUM(cache_hits), SUM(latency_ms_sum)"
_MINUTE_COUNTS = f"""
SELECT network, endpoint, {_SUMS} FROM usage_minute WHERE minute >= ? AND minute < ?
GROUP BY network, endpoint
"""
_WINDOW_COUNTS = f"""
SELECT network, endpoint, {_SUMS}
FROM (
    SELECT network, endpoint, requests, errors, failovers, cache_hits, latency_ms_sum
    FROM usage_hour WHERE hour >= ?
    UNION ALL
    SELECT network, endpoint, requests, errors, failovers, cache_hits, latency_ms_sum
    FROM usage_minute WHERE minute >= ? AND minute < ?
)
GROUP BY network, endpoint
"""
_HOUR_HISTS = """
SELECT network, bucket, SUM(count) FROM hist_hour WHERE hour >= ? GROUP BY network, bucket
"""
_MINUTE_HISTS = "SELECT network, hist FROM hist_minute WHERE minute >= ? AND minute < ?"


class StoreUnavailable(RuntimeError):
    """The database could not be read or written (locked, disk full, corrupt)."""


@dataclass(frozen=True, slots=True)
class IngestResult:
    duplicate: bool
    rollups: int  # in the batch
    stored: int  # of those, stored: older than the window or empty ones are dropped


_encode = json.JSONEncoder(separators=(",", ":")).encode


def hist_json(hist: Hist) -> str:
    """The stored form of a histogram: a flat JSON array ``[bucket, count, …]`` in
    bucket order (``[195,4,230,6]``): compact, and twice as fast to read back
    as the wire's ``{"195":4,"230":6}``."""
    return _encode([x for b, n in sorted(hist.items()) if n for x in (b, n)])


def _parse_hist(text: str | None, into: Hist) -> None:
    flat = json.loads(text or "[]")
    if type(flat) is not list or len(flat) % 2:
        raise ValueError("not a flat [bucket, count, ...] array")
    it = iter(flat)
    for b, n in zip(it, it, strict=True):
        into[b] = into.get(b, 0) + n


def _hist_merge(a: str | None, b: str | None) -> str:
    """SQLite function: the merge of two stored histograms. An unreadable stored
    value is logged and replaced rather than blocking every later ingest."""
    out: Hist = {}
    for text in (a, b):
        try:
            _parse_hist(text, out)
        except (ValueError, TypeError, AttributeError) as e:
            log.warning("dropping an unreadable stored latency histogram: %s", e)
    return hist_json(out)


def _read_totals(counts: Iterable[Any], hists: Iterable[Any]) -> WindowTotals:
    out = WindowTotals()
    for net, ep, req, err, fo, ch, lsum in counts:
        out.counts[(net, ep)] = Counts(req, err, fo, ch, lsum)
    for net, text in hists:
        try:
            _parse_hist(text, out.hists.setdefault(net, {}))
        except (ValueError, TypeError, AttributeError) as e:
            log.warning("skipping an unreadable stored latency histogram: %s", e)
    return out


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
        self.rebuilds = 0  # times the in-memory totals were rebuilt from the database
        self.updated: float | None = None
        self._next_prune = float("-inf")
        self._lock = threading.Lock()
        self._totals: WindowTotals | None = None  # the window starting at _start
        self._start = 0
        db: sqlite3.Connection | None = None
        try:
            # 16 MiB of page cache: the hot B-tree pages of a week of rollups.
            db = open_db(path, _SCHEMA, busy_timeout_ms=busy_timeout_ms, cache_kib=16384)
            db.create_function("hist_merge", 2, _hist_merge, deterministic=True)
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
        log.error("usage %s failed (%s): %s", what, type(e).__name__, e)
        return StoreUnavailable(f"usage store {what} failed: {e}")

    # --- the in-memory window (call with the lock held) -------------------------------------

    def _advance(self, now: float) -> int:
        """Move the in-memory totals to the window ending at ``now``; its start."""
        start = window_start_minute(now, self.window_s)
        totals, self._totals = self._totals, None  # stays None if reading fails
        if totals is None or start < self._start or start - self._start > MAX_SLIDE_MINUTES:
            first_hour = _first_full_hour(start)
            edge = (start, first_hour * 60)
            totals = _read_totals(
                self._db.execute(_WINDOW_COUNTS, (first_hour, *edge)),
                self._db.execute(_MINUTE_HISTS, edge),
            )
            for net, b, n in self._db.execute(_HOUR_HISTS, (first_hour,)):
                h = totals.hists.setdefault(net, {})
                h[b] = h.get(b, 0) + n
            self.rebuilds += 1
        elif start > self._start:
            leaving = (self._start, start)
            totals.subtract(
                _read_totals(
                    self._db.execute(_MINUTE_COUNTS, leaving),
                    self._db.execute(_MINUTE_HISTS, leaving),
                )
            )
        self._totals, self._start = totals, start
        return start

    # --- writing ---------------------------------------------------------------------------

    def ingest(self, batch: Batch, now: float) -> IngestResult:
        """Merge a validated batch in one transaction; a known batch id is a no-op.
        Rollups older than the window ending at ``now`` are dropped."""
        start = window_start_minute(now, self.window_s)
        minutes: dict[tuple[int, str, str, str], list[Any]] = {}
        hours: dict[tuple[int, str, str], Counts] = {}
        minute_hists: dict[tuple[int, str], Hist] = {}
        hour_hists: dict[tuple[int, str], Hist] = {}
        stored = 0
        for r in batch.rollups:
            if r.minute < start or not r.requests:
                continue
            stored += 1
            key = r.key
            row = minutes.get(key)
            if row is None:
                minutes[key] = [r.requests, r.errors, r.failovers, r.cache_hits,
                                r.latency_ms_sum, dict(r.hist)]  # fmt: skip
            else:
                row[0] += r.requests
                row[1] += r.errors
                row[2] += r.failovers
                row[3] += r.cache_hits
                row[4] += r.latency_ms_sum
                _add(row[5], r.hist)
            hour = r.minute // 60
            c = hours.get((hour, r.network, key[2]))
            if c is None:
                c = hours[(hour, r.network, key[2])] = Counts()
            c.add(r)
            _add(minute_hists.setdefault((r.minute, r.network), {}), r.hist)
        for (minute, net), h in minute_hists.items():
            _add(hour_hists.setdefault((minute // 60, net), {}), h)
        minute_rows = [(*k, *v[:5], hist_json(v[5])) for k, v in minutes.items()]
        hour_rows = [
            (*k, c.requests, c.errors, c.failovers, c.cache_hits, c.latency_ms_sum)
            for k, c in hours.items()
        ]

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
                    db.executemany(_UPSERT_MINUTE, minute_rows)
                    db.executemany(_UPSERT_HOUR, hour_rows)
                    db.executemany(
                        _UPSERT_HIST_MINUTE,
                        [(*k, hist_json(h)) for k, h in minute_hists.items()],
                    )
                    db.executemany(
                        _UPSERT_HIST_HOUR,
                        [(*k, b, n) for k, h in hour_hists.items() for b, n in h.items()],
                    )
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
            totals = self._totals
            if totals is not None:
                for (_hour, net, ep), c in hours.items():
                    totals.add_counts(net, ep, c)
                for (_minute, net), h in minute_hists.items():
                    totals.add_hist(net, h)
        if now >= self._next_prune:
            self.prune(now)
        return IngestResult(False, len(batch.rollups), stored)

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
        with self._lock:
            try:
                self._advance(now)
            except (sqlite3.Error, OSError) as e:
                raise self._fail("read", e) from e
            assert self._totals is not None
            return self._totals.copy()

    def rebuild_totals(self, now: float) -> WindowTotals:
        """The window totals read from the database alone (checks the in-memory ones)."""
        with self._lock:
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
        start = (int(now) - self.window_s) // 3600
        sql = "SELECT hour, SUM(requests) FROM usage_hour WHERE hour >= ?"
        args: list[Any] = [start]
        if network is not None:
            sql += " AND network = ?"
            args.append(network)
        sql += " GROUP BY hour ORDER BY hour"
        with self._lock:
            try:
                return [(int(h), int(n)) for h, n in self._db.execute(sql, args)]
            except sqlite3.Error as e:
                raise self._fail("hourly read", e) from e

    def row_counts(self) -> dict[str, int]:
        with self._lock:
            return {
                t: self._db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                for t in (
                    "usage_minute",
                    "hist_minute",
                    "usage_hour",
                    "hist_hour",
                    "usage_batches",
                )
            }


def _add(into: Hist, hist: Hist) -> None:
    for b, n in hist.items():
        into[b] = into.get(b, 0) + n
