"""SQLite storage of the usage rollups: ``data_dir/usage.sqlite3`` (WAL).

Tables (all ``WITHOUT ROWID``, keyed so that storage grows with the number of
distinct keys, never with the number of calls):

* ``usage_minute`` — the rollups as received, merged per
  ``(minute, network, endpoint or '', method)``: counts, latency sum and the
  latency histogram as compact JSON (``{"195":4,"230":6}``, the wire form).
* ``usage_hour`` — the same counts per ``(hour, network, endpoint)``, and
  ``hist_hour`` — one histogram per ``(hour, network)``, one row per bucket.
  Both are kept up to date by every ingest, in the same transaction, so the
  7-day summary reads ~170 hours of pre-merged rows plus the minutes of the
  one hour cut by the window's start, instead of ~10k minutes x keys.
* ``usage_batches`` — the batch ids seen (idempotency), kept 8 days.
* ``usage_meta`` — ``updated``: the time of the last successful ingest.

A batch is merged in one transaction (all or nothing): a batch id already
seen changes nothing. Rollups older than the window are dropped on ingest and
pruned (every ``prune_interval_s`` of ingest time, and by the caller's
timer). SQLite or disk errors are logged, counted and raised as
``StoreUnavailable`` (the API answers 503 and the addon keeps the batch).

The store is synchronous and thread-safe (one lock around the connection),
so the API can run it off the event loop with ``asyncio.to_thread``.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

from chainproxy.latency_hist import Hist
from sidecar.stats import WINDOW_S, Batch, Counts, WindowTotals, window_start_minute

log = logging.getLogger("chainproxy.sidecar.usage")

BATCH_RETENTION_S = WINDOW_S + 86_400

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

_UPSERT_MINUTE = """
INSERT INTO usage_minute (minute, network, endpoint, method, requests, errors, failovers,
                          cache_hits, latency_ms_sum, hist)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (minute, network, endpoint, method) DO UPDATE SET
    requests = requests + excluded.requests,
    errors = errors + excluded.errors,
    failovers = failovers + excluded.failovers,
    cache_hits = cache_hits + excluded.cache_hits,
    latency_ms_sum = latency_ms_sum + excluded.latency_ms_sum,
    hist = hist_merge(hist, excluded.hist)
"""
_UPSERT_HOUR = """
INSERT INTO usage_hour (hour, network, endpoint, requests, errors, failovers, cache_hits,
                        latency_ms_sum)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (hour, network, endpoint) DO UPDATE SET
    requests = requests + excluded.requests,
    errors = errors + excluded.errors,
    failovers = failovers + excluded.failovers,
    cache_hits = cache_hits + excluded.cache_hits,
    latency_ms_sum = latency_ms_sum + excluded.latency_ms_sum
"""
_UPSERT_HIST = """
INSERT INTO hist_hour (hour, network, bucket, count) VALUES (?, ?, ?, ?)
ON CONFLICT (hour, network, bucket) DO UPDATE SET count = count + excluded.count
"""
_COUNTS = """
SELECT network, endpoint, SUM(requests), SUM(errors), SUM(failovers), SUM(cache_hits),
       SUM(latency_ms_sum)
FROM (
    SELECT network, endpoint, requests, errors, failovers, cache_hits, latency_ms_sum
    FROM usage_hour WHERE hour >= ?
    UNION ALL
    SELECT network, endpoint, requests, errors, failovers, cache_hits, latency_ms_sum
    FROM usage_minute WHERE minute >= ? AND minute < ?
)
GROUP BY network, endpoint
"""
_HISTS = """
SELECT network, bucket, SUM(count) FROM hist_hour WHERE hour >= ? GROUP BY network, bucket
UNION ALL
SELECT m.network, CAST(j.key AS INTEGER), SUM(j.value)
FROM usage_minute AS m, json_each(m.hist) AS j
WHERE m.minute >= ? AND m.minute < ?
GROUP BY m.network, j.key
"""


class StoreUnavailable(RuntimeError):
    """The database could not be read or written (locked, disk full, corrupt)."""


@dataclass(frozen=True, slots=True)
class IngestResult:
    duplicate: bool
    rollups: int  # in the batch
    stored: int  # of those, inside the window (older ones are dropped)


def hist_json(hist: Hist) -> str:
    """The compact, canonical (bucket-ordered) JSON form of a histogram."""
    return "{" + ",".join(f'"{b}":{n}' for b, n in sorted(hist.items()) if n) + "}"


def _hist_merge(a: str | None, b: str | None) -> str:
    """SQLite function: the merge of two stored histograms. An unreadable stored
    value is logged and replaced rather than blocking every later ingest."""
    out: Hist = {}
    for text in (a, b):
        try:
            for k, n in json.loads(text or "{}").items():
                out[int(k)] = out.get(int(k), 0) + int(n)
        except (ValueError, TypeError, AttributeError) as e:
            log.warning("dropping an unreadable stored latency histogram: %s", e)
    return hist_json(out)


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
        self.generation = 0  # bumped by every change: lets readers cache totals
        self.updated: float | None = None
        self._next_prune = float("-inf")
        self._lock = threading.Lock()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._db.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            self._db.create_function("hist_merge", 2, _hist_merge, deterministic=True)
            row = self._db.execute("SELECT value FROM usage_meta WHERE key = 'updated'").fetchone()
        except (sqlite3.Error, OSError) as e:
            self.errors += 1
            log.error("usage store %s cannot be opened (%s): %s", path, type(e).__name__, e)
            raise StoreUnavailable(f"usage store cannot be opened: {e}") from e
        if row is not None:
            try:
                self.updated = float(row[0])
            except ValueError:
                log.warning("ignoring an unreadable usage 'updated' value %r", row[0])

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # --- writing ---------------------------------------------------------------------------

    def ingest(self, batch: Batch, now: float) -> IngestResult:
        """Merge a validated batch in one transaction; a known batch id is a no-op."""
        start = window_start_minute(now, self.window_s)
        minutes: dict[tuple[int, str, str, str], list] = {}
        hours: dict[tuple[int, str, str], Counts] = {}
        hists: dict[tuple[int, str], Hist] = {}
        stored = 0
        for r in batch.rollups:
            if r.minute < start:
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
                h = row[5]
                for b, n in r.hist.items():
                    h[b] = h.get(b, 0) + n
            hour = r.minute // 60
            c = hours.get((hour, r.network, key[2]))
            if c is None:
                c = hours[(hour, r.network, key[2])] = Counts()
            c.add(r)
            h = hists.get((hour, r.network))
            if h is None:
                h = hists[(hour, r.network)] = {}
            for b, n in r.hist.items():
                h[b] = h.get(b, 0) + n
        minute_rows = [(*k, *v[:5], hist_json(v[5])) for k, v in minutes.items()]
        hour_rows = [
            (*k, c.requests, c.errors, c.failovers, c.cache_hits, c.latency_ms_sum)
            for k, c in hours.items()
        ]
        hist_rows = [(*k, b, n) for k, h in hists.items() for b, n in h.items()]

        with self._lock:
            try:
                db = self._db
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
                    db.executemany(_UPSERT_HIST, hist_rows)
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
                self.errors += 1
                log.error("usage ingest failed (%s): %s", type(e).__name__, e)
                raise StoreUnavailable(f"usage store write failed: {e}") from e
            self.updated = now
            self.generation += 1
        if now >= self._next_prune:
            self.prune(now)
        return IngestResult(False, len(batch.rollups), stored)

    def prune(self, now: float) -> int:
        """Delete rollups older than the window and batch ids older than the
        retention; returns the rows removed (0 after logging on an error)."""
        start = window_start_minute(now, self.window_s)
        # The hour cut by the window's start is read from usage_minute: its
        # hour rows are no longer needed, but keep one spare hour anyway.
        old_hour = start // 60
        self._next_prune = now + self.prune_interval_s
        with self._lock:
            try:
                with self._db:
                    self._db.execute("BEGIN IMMEDIATE")
                    removed = 0
                    for sql, arg in (
                        ("DELETE FROM usage_minute WHERE minute < ?", start),
                        ("DELETE FROM usage_hour WHERE hour < ?", old_hour),
                        ("DELETE FROM hist_hour WHERE hour < ?", old_hour),
                        (
                            "DELETE FROM usage_batches WHERE received < ?",
                            now - self.batch_retention_s,
                        ),
                    ):
                        removed += self._db.execute(sql, (arg,)).rowcount
            except (sqlite3.Error, OSError) as e:
                self.errors += 1
                log.error("usage prune failed (%s): %s", type(e).__name__, e)
                return 0
            if removed:
                self.generation += 1
        return removed

    # --- reading ---------------------------------------------------------------------------

    def window_totals(self, now: float) -> WindowTotals:
        """Counts per (network, endpoint) and a merged histogram per network over
        the window ending at ``now``: whole hours from the hourly tables, the
        hour cut by the window's start from the minute rows."""
        start = window_start_minute(now, self.window_s)
        if start % 60 == 0:
            first_hour, edge = start // 60, (0, 0)
        else:
            first_hour = start // 60 + 1
            edge = (start, first_hour * 60)
        out = WindowTotals()
        with self._lock:
            try:
                for net, ep, req, err, fo, ch, lsum in self._db.execute(
                    _COUNTS, (first_hour, *edge)
                ):
                    out.counts[(net, ep)] = Counts(req, err, fo, ch, lsum)
                for net, b, n in self._db.execute(_HISTS, (first_hour, *edge)):
                    h = out.hists.setdefault(net, {})
                    h[b] = h.get(b, 0) + n
            except (sqlite3.Error, OSError) as e:
                self.errors += 1
                log.error("usage read failed (%s): %s", type(e).__name__, e)
                raise StoreUnavailable(f"usage store read failed: {e}") from e
        return out

    def row_counts(self) -> dict[str, int]:
        with self._lock:
            return {
                t: self._db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                for t in ("usage_minute", "usage_hour", "hist_hour", "usage_batches")
            }
