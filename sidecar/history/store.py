"""Per-minute probe history in SQLite (``data_dir/history.sqlite3``), a day of it.

One row per (endpoint, minute): at most 1 440 rows per endpoint, pruned as
minutes leave the day. Written in small upserts (the minutes the Prober
touched since the last write); errors are logged once and counted, never
raised into the probe loop or the dashboard (which then draws no history).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from common.outage import Outage
from sidecar.db import open_db
from sidecar.history.series import KEEP_S, Minute

log = logging.getLogger("chainproxy.sidecar.history")

HISTORY_DB = "history.sqlite3"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS probe_minutes (
    endpoint_id TEXT NOT NULL,
    minute INTEGER NOT NULL,
    probes INTEGER NOT NULL,
    fails INTEGER NOT NULL,
    latency_sum REAL NOT NULL,
    latency_n INTEGER NOT NULL,
    lag_max INTEGER,
    PRIMARY KEY (endpoint_id, minute)
) WITHOUT ROWID;
"""
_UPSERT = """
INSERT INTO probe_minutes (endpoint_id, minute, probes, fails, latency_sum, latency_n, lag_max)
VALUES (?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (endpoint_id, minute) DO UPDATE SET
    probes = probes + excluded.probes,
    fails = fails + excluded.fails,
    latency_sum = latency_sum + excluded.latency_sum,
    latency_n = latency_n + excluded.latency_n,
    lag_max = MAX(COALESCE(lag_max, excluded.lag_max), COALESCE(excluded.lag_max, lag_max))
"""


class HistoryStore:
    def __init__(self, path: Path) -> None:
        self.errors = 0
        self._outage = Outage()
        self._db = open_db(path, _SCHEMA)

    def close(self) -> None:
        self._db.close()

    def _failed(self, what: str, e: sqlite3.Error) -> None:
        self.errors += 1
        if self._outage.failed():
            log.error("probe history %s failed (%s): %s", what, type(e).__name__, e)

    def add(self, minutes: Mapping[tuple[str, int], Minute], now: float) -> None:
        """Add the minutes' probes to what is stored, and drop the minutes past a day."""
        rows = [
            (eid, m, b.probes, b.fails, b.latency_sum, b.latency_n, b.lag_max)
            for (eid, m), b in minutes.items()
        ]
        try:
            with self._db:
                self._db.executemany(_UPSERT, rows)
                cutoff = int((now - KEEP_S) // 60)
                self._db.execute("DELETE FROM probe_minutes WHERE minute < ?", (cutoff,))
        except sqlite3.Error as e:
            self._failed("write", e)
            return
        self._outage.ok()

    def minutes(
        self, endpoint_ids: Sequence[str], since_minute: int
    ) -> dict[str, dict[int, Minute]]:
        """The stored minutes of these endpoints from ``since_minute`` on."""
        out: dict[str, dict[int, Minute]] = {eid: {} for eid in endpoint_ids}
        if not endpoint_ids:
            return out
        marks = ",".join("?" * len(endpoint_ids))
        try:
            rows: Iterable[tuple] = self._db.execute(
                "SELECT endpoint_id, minute, probes, fails, latency_sum, latency_n, lag_max"
                f" FROM probe_minutes WHERE minute >= ? AND endpoint_id IN ({marks})",
                (since_minute, *endpoint_ids),
            ).fetchall()
        except sqlite3.Error as e:
            self._failed("read", e)
            return out
        for eid, m, probes, fails, lat_sum, lat_n, lag in rows:
            out[eid][m] = Minute(probes, fails, lat_sum, lat_n, lag)
        return out
