"""The dashboard's words for what the API's documents hold as numbers (pure):
the statistics' ``updated`` time, a node's back-off, budget and learned
rate, and its state horizon."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any


def age_text(seconds: float) -> str:
    """How long ago, roughly: ``just now``, ``42 s ago``, ``7 min ago``, ``3 h ago``,
    ``2 d ago``; a time ahead of the clock (skew) is ``just now``."""
    s = int(seconds)
    if s < 5:
        return "just now"
    for unit, size in (("d", 86_400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s // size} {unit} ago"
    return f"{s} s ago"


def updated_text(updated: float | None, now: float) -> str | None:
    """``2027-01-15 08:15:00 UTC (3 min ago)``; None when never updated."""
    if updated is None:
        return None
    stamp = datetime.fromtimestamp(updated, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{stamp} ({age_text(now - updated)})"


def backoff_text(until_iso: str, now: float) -> str:
    """An endpoint row's ``backoff_until`` in words: ``backing off until 14:03:21 UTC``,
    with the date when it is not today's (a long Retry-After)."""
    until = datetime.fromisoformat(until_iso)
    today = until.date() == datetime.fromtimestamp(now, UTC).date()
    fmt = "%H:%M:%S" if today else "%Y-%m-%d %H:%M:%S"
    return f"backing off until {until.strftime(fmt)} UTC"


def capacity_text(row: Mapping[str, Any]) -> str:
    """An endpoint row's budget and learned rate: ``≤ 20/s, ≤ 8 in flight · learned 12/s``;
    empty when it has neither (unlimited, nothing learned)."""
    budget = row["budget"]
    limits = []
    if budget["max_rps"] is not None:
        limits.append(f"≤ {budget['max_rps']}/s")
    if budget["max_concurrency"] is not None:
        limits.append(f"≤ {budget['max_concurrency']} in flight")
    parts = [", ".join(limits)] if limits else []
    if row["learned_rps"] is not None:
        parts.append(f"learned {row['learned_rps']}/s")
    return " · ".join(parts)


def horizon_text(horizon: Mapping[str, Any]) -> str:
    """An endpoint row's state horizon: ``archive``, ``last 256 blocks``
    (``≥`` while still narrowed down), ``from #4123456``, ``≥ #4123000`` (held
    from there, the rest not known yet); empty while nothing is known."""
    earliest, keeps, model = horizon["earliest"], horizon["keeps"], horizon["model"]
    if model == "archive" or earliest == 0:
        return "archive"
    if earliest is None:
        return ""
    if keeps is not None:
        return f"last {keeps} blocks" if horizon["exact"] else f"last ≥ {keeps} blocks"
    return f"from #{earliest}" if horizon["exact"] else f"≥ #{earliest}"
