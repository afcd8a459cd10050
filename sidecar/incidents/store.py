"""SQLite persistence for incidents: table ``incidents`` in ``data_dir/sidecar.sqlite3``.

The same file as the probe store (``sidecar.probing.store``), its own connection and
table, opened by ``sidecar.db`` (WAL), so incidents and the health they follow
are restored together. Rows are upserted by id; bounds are applied by ``IncidentTracker``
(which deletes what it prunes). A damaged row is skipped with a log line.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from pathlib import Path

from sidecar.db import open_db
from sidecar.incidents.tracker import Incident

log = logging.getLogger("chainproxy.sidecar.incident_store")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS incidents (
    id INTEGER PRIMARY KEY,
    endpoint_id TEXT NOT NULL,
    started REAL NOT NULL,
    ended REAL,
    message TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS incidents_endpoint ON incidents (endpoint_id, started);
"""


class IncidentStore:
    def __init__(self, path: Path, *, busy_timeout_ms: int = 2000) -> None:
        self.path = path
        self._db = open_db(path, _SCHEMA, busy_timeout_ms=busy_timeout_ms)

    def close(self) -> None:
        self._db.close()

    def load(self) -> list[Incident]:
        out = []
        rows = self._db.execute(
            "SELECT id, endpoint_id, started, ended, message FROM incidents ORDER BY id"
        )
        for iid, eid, started, ended, message in rows:
            if not _valid(iid, eid, started, ended, message):
                log.warning("ignoring unreadable incident row %r", iid)
                continue
            out.append(Incident(iid, eid, float(started), message, _opt_float(ended)))
        return out

    def save(self, incidents: Iterable[Incident]) -> None:
        rows = [(i.id, i.endpoint_id, i.started, i.ended, i.message) for i in incidents]
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT INTO incidents (id, endpoint_id, started, ended, message)"
                " VALUES (?,?,?,?,?) ON CONFLICT(id) DO UPDATE SET endpoint_id ="
                " excluded.endpoint_id, started = excluded.started, ended = excluded.ended,"
                " message = excluded.message",
                rows,
            )

    def delete(self, ids: Iterable[int]) -> None:
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany("DELETE FROM incidents WHERE id = ?", [(i,) for i in ids])

    def count(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM incidents").fetchone()[0]


def _is_num(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _valid(iid: object, eid: object, started: object, ended: object, message: object) -> bool:
    return (
        isinstance(iid, int)
        and isinstance(eid, str)
        and _is_num(started)
        and (ended is None or _is_num(ended))
        and isinstance(message, str)
    )


def _opt_float(v: float | None) -> float | None:
    return None if v is None else float(v)
