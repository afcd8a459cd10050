"""The usage store's tables and SQL statements (text only; ``sidecar.usage.store`` runs them).

All tables are ``WITHOUT ROWID``, keyed so that storage grows with the number
of distinct keys, never with the number of calls:

* ``usage_minute`` — the rollups as received, merged per
  ``(minute, network, endpoint or '', method)``: counts, latency sum and the
  latency histogram as a flat JSON array (``[195,4,230,6]``, see
  ``sidecar.usage.rows.hist_json``).
* ``hist_minute`` — one merged histogram per ``(minute, network)``.
* ``usage_hour`` / ``hist_hour`` — counts per ``(hour, network, endpoint)`` and
  the histogram per ``(hour, network)``, one row per bucket (merged by SQL
  alone: rewriting a histogram of hundreds of buckets on every batch is slow).
* ``usage_method_hour`` — requests and quota units per ``(hour, network,
  method)``: the top methods by units (a database of an older release gets
  the table, empty, when it is opened; an older proxy's rollups carry no
  units and count 0).
* ``usage_batches`` — the batch ids seen (idempotency), kept 8 days.
* ``usage_meta`` — ``updated``: the time of the last successful ingest.

The upserts of stored histograms call ``hist_merge``, a function the store
registers on its connection (``sidecar.usage.rows.hist_merge``).
"""

from __future__ import annotations

SCHEMA = """
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
CREATE TABLE IF NOT EXISTS usage_method_hour (
    hour INTEGER NOT NULL,
    network TEXT NOT NULL,
    method TEXT NOT NULL,
    requests INTEGER NOT NULL,
    units INTEGER NOT NULL,
    PRIMARY KEY (hour, network, method)
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
UPSERT_MINUTE = f"""
INSERT INTO usage_minute (minute, network, endpoint, method, requests, errors, failovers,
                          cache_hits, latency_ms_sum, hist)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (minute, network, endpoint, method) DO UPDATE SET {_COUNT_SUMS},
    hist = hist_merge(hist, excluded.hist)
"""
UPSERT_HOUR = f"""
INSERT INTO usage_hour (hour, network, endpoint, requests, errors, failovers, cache_hits,
                        latency_ms_sum)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (hour, network, endpoint) DO UPDATE SET {_COUNT_SUMS}
"""
UPSERT_METHOD_HOUR = """
INSERT INTO usage_method_hour (hour, network, method, requests, units) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (hour, network, method) DO UPDATE SET
    requests = requests + excluded.requests, units = units + excluded.units
"""
UPSERT_HIST_MINUTE = """
INSERT INTO hist_minute (minute, network, hist) VALUES (?, ?, ?)
ON CONFLICT (minute, network) DO UPDATE SET hist = hist_merge(hist, excluded.hist)
"""
UPSERT_HIST_HOUR = """
INSERT INTO hist_hour (hour, network, bucket, count) VALUES (?, ?, ?, ?)
ON CONFLICT (hour, network, bucket) DO UPDATE SET count = count + excluded.count
"""
_SUMS = "SUM(requests), SUM(errors), SUM(failovers), SUM(cache_hits), SUM(latency_ms_sum)"
MINUTE_COUNTS = f"""
SELECT network, endpoint, {_SUMS} FROM usage_minute WHERE minute >= ? AND minute < ?
GROUP BY network, endpoint
"""
WINDOW_COUNTS = f"""
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
HOUR_HISTS = """
SELECT network, bucket, SUM(count) FROM hist_hour WHERE hour >= ? GROUP BY network, bucket
"""
MINUTE_HISTS = "SELECT network, hist FROM hist_minute WHERE minute >= ? AND minute < ?"
