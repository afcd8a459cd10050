"""SQLite persistence for probe history, per-endpoint health and each
network's runtime.

One file in ``data_dir``, opened by ``sidecar.db`` (WAL: readers never wait
for the prober). Probe history is bounded (age and rows per endpoint); health
is one row per endpoint, so a restart resumes with the statuses it had; the
runtime is one row per network (``sidecar.probing.chain_runtime``: its JSON form).
Errors (locked or full disk) are counted, never raised into the probe loop,
and logged once when writing starts failing and once when it works again.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterable
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from common.outage import Outage
from sidecar.db import open_db
from sidecar.probing.health import Health
from sidecar.probing.horizon import horizon_from_json
from sidecar.probing.results import ProbeResult

log = logging.getLogger("chainproxy.sidecar.store")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS probes (
    id INTEGER PRIMARY KEY,
    endpoint_id TEXT NOT NULL,
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    classification TEXT NOT NULL,
    latency_ms INTEGER,
    best INTEGER,
    finalized INTEGER,
    archive INTEGER,
    detail TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS probes_endpoint_at ON probes (endpoint_id, at);
CREATE TABLE IF NOT EXISTS health (
    endpoint_id TEXT PRIMARY KEY,
    state TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS runtimes (
    network TEXT PRIMARY KEY,
    state TEXT NOT NULL
);
"""
_HEALTH_FIELDS = {f.name for f in fields(Health)}


class Store:
    def __init__(
        self,
        path: Path,
        *,
        retention_s: float = 7 * 86400,
        max_probes_per_endpoint: int = 2000,
    ) -> None:
        self.path = path
        self.retention_s = retention_s
        self.max_per_endpoint = max_probes_per_endpoint
        self.errors = 0
        self._outage = Outage()
        self._writes = 0
        self._db = open_db(path, _SCHEMA)

    def close(self) -> None:
        self._db.close()

    def record(self, results: Iterable[ProbeResult], health: dict[str, Health], now: float) -> None:
        """Append probe results and upsert the endpoints' health, in one transaction."""
        rows = [
            (
                r.endpoint_id,
                r.at,
                r.kind,
                r.classification,
                r.latency_ms,
                r.best,
                r.finalized,
                None if r.archive is None else int(r.archive),
                r.detail[:300],
            )
            for r in results
        ]
        states = [(eid, json.dumps(asdict(h))) for eid, h in health.items()]
        try:
            with self._db:
                self._db.execute("BEGIN")
                self._db.executemany(
                    "INSERT INTO probes (endpoint_id, at, kind, classification, latency_ms,"
                    " best, finalized, archive, detail) VALUES (?,?,?,?,?,?,?,?,?)",
                    rows,
                )
                self._db.executemany(
                    "INSERT INTO health (endpoint_id, state) VALUES (?, ?)"
                    " ON CONFLICT(endpoint_id) DO UPDATE SET state = excluded.state",
                    states,
                )
        except sqlite3.Error as e:
            self._failed("write", e)
            return
        n = self._outage.ok()
        if n is not None:
            log.warning("probe store works again (%d failed operations while it did not)", n)
        self._writes += 1
        if self._writes % 100 == 1:
            self.prune(now)

    def _failed(self, what: str, e: sqlite3.Error) -> None:
        self.errors += 1
        if self._outage.failed():  # once: a full disk fails every probe round
            log.error("probe store %s failed (%s): %s", what, type(e).__name__, e)

    def prune(self, now: float) -> int:
        """Drop probes past the retention age and beyond the per-endpoint cap."""
        try:
            with self._db:
                cur = self._db.execute("DELETE FROM probes WHERE at < ?", (now - self.retention_s,))
                removed = cur.rowcount
                cur = self._db.execute(
                    "DELETE FROM probes WHERE id IN (SELECT id FROM (SELECT id, ROW_NUMBER()"
                    " OVER (PARTITION BY endpoint_id ORDER BY at DESC) AS n FROM probes)"
                    " WHERE n > ?)",
                    (self.max_per_endpoint,),
                )
                return removed + cur.rowcount
        except sqlite3.Error as e:
            self._failed("prune", e)
            return 0

    def load_health(self) -> dict[str, Health]:
        out: dict[str, Health] = {}
        for eid, state in self._db.execute("SELECT endpoint_id, state FROM health"):
            try:
                out[eid] = _health_from_json(state)
            except (ValueError, TypeError) as e:
                log.warning("ignoring unreadable health row for %s: %s", eid, e)
        return out

    def load_runtimes(self) -> dict[str, str]:
        """Network -> the stored state of its runtime (``ChainRuntimeBook``'s JSON)."""
        try:
            return dict(self._db.execute("SELECT network, state FROM runtimes").fetchall())
        except sqlite3.Error as e:
            self._failed("read", e)
            return {}

    def save_runtime(self, network: str, state: str) -> None:
        try:
            self._db.execute(
                "INSERT INTO runtimes (network, state) VALUES (?, ?)"
                " ON CONFLICT(network) DO UPDATE SET state = excluded.state",
                (network, state),
            )
        except sqlite3.Error as e:
            self._failed("write", e)

    def recent_probes(self, endpoint_id: str, limit: int = 20) -> list[ProbeResult]:
        rows = self._db.execute(
            "SELECT endpoint_id, at, kind, classification, latency_ms, best, finalized, archive,"
            " detail FROM probes WHERE endpoint_id = ? ORDER BY at DESC LIMIT ?",
            (endpoint_id, limit),
        ).fetchall()
        return [
            ProbeResult(
                endpoint_id=r[0],
                at=r[1],
                kind=r[2],
                classification=r[3],
                latency_ms=r[4],
                best=r[5],
                finalized=r[6],
                archive=None if r[7] is None else bool(r[7]),
                detail=r[8],
            )
            for r in rows
        ]

    def probe_count(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM probes").fetchone()[0]


_INT_OR_NONE = ("best", "finalized")
_NUM_OR_NONE = ("last_probe_at", "last_ok_at", "latency_ms", "best_at")
_INTS = ("consecutive_failures", "consecutive_successes")


def _health_from_json(state: str) -> Health:
    """A stored Health row, type-checked field by field: a damaged row is
    rejected here rather than breaking the routing math later."""
    raw = json.loads(state)
    if not isinstance(raw, dict):
        raise ValueError("not an object")
    kw: dict[str, Any] = {k: v for k, v in raw.items() if k in _HEALTH_FIELDS}
    for k in _INT_OR_NONE:
        if kw.get(k) is not None and (isinstance(kw[k], bool) or not isinstance(kw[k], int)):
            raise ValueError(f"{k} is not an integer")
    for k in _NUM_OR_NONE:
        if kw.get(k) is not None and (
            isinstance(kw[k], bool) or not isinstance(kw[k], int | float)
        ):
            raise ValueError(f"{k} is not a number")
    for k in _INTS:
        if k in kw and (isinstance(kw[k], bool) or not isinstance(kw[k], int)):
            raise ValueError(f"{k} is not an integer")
    if kw.get("status", "Unknown") not in ("OK", "Degraded", "Unknown"):
        raise ValueError("bad status")
    if kw.get("archive") is not None and not isinstance(kw["archive"], bool):
        raise ValueError("archive is not a boolean")
    for k in ("classification", "message"):
        if k in kw and not isinstance(kw[k], str):
            raise ValueError(f"{k} is not a string")
    recent = kw.get("recent", [])
    if not isinstance(recent, list) or not all(isinstance(x, bool) for x in recent):
        raise ValueError("recent is not a list of booleans")
    kw["recent"] = tuple(recent)
    if "horizon" in kw:
        kw["horizon"] = horizon_from_json(kw["horizon"])
    return Health(**kw)
