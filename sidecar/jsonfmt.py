"""How times and percentages look in every JSON answer of the sidecar (pure).

docs/OPERATIONS.md#dashboard-and-json-api: times are UTC ISO-8601 strings,
percentages numbers 0-100. One definition, so the usage summary, the registry
documents and the routing snapshot
cannot drift apart.
"""

from __future__ import annotations

from datetime import UTC, datetime


def iso(ts: float | None) -> str | None:
    """Unix time as UTC ISO-8601 to the second with a ``Z`` (``2025-11-21T04:40:00Z``)."""
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def pct(count: float, total: float) -> float:
    """``count / total`` in percent, 2 decimals; 0 for an empty total."""
    return round(count / total * 100, 2) if total else 0.0
