"""Opening the sidecar's SQLite files: one set-up for every store.

Each store (probes and health, incidents, usage) has its own connection. All
of them run in autocommit mode (``isolation_level=None``: the stores issue
their own ``BEGIN``), may be used from a worker thread (the usage store runs
off the event loop), wait a bounded time for a lock held by another
connection, and use WAL so a reader never waits for a writer.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

SIDECAR_DB = "sidecar.sqlite3"  # probes, health and incidents share this file in data_dir


def open_db(
    path: Path, schema: str, *, busy_timeout_ms: int = 2000, cache_kib: int | None = None
) -> sqlite3.Connection:
    """Connect to ``path`` (its directory created), set WAL up and run ``schema``
    (``CREATE … IF NOT EXISTS``). ``cache_kib`` sizes the page cache. Raises
    ``sqlite3.Error`` or ``OSError``; the connection is closed on failure."""
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        # The busy timeout first: switching to WAL itself may wait for a lock.
        db.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        if cache_kib is not None:
            db.execute(f"PRAGMA cache_size={-int(cache_kib)}")  # negative: KiB, not pages
        db.executescript(schema)
    except BaseException:
        db.close()
        raise
    return db
