"""The dashboard's 7-day usage chart as plain numbers for inline SVG (pure: no
JavaScript, readable in any browser): one stacked bar per hour, from the
bottom: cache hits (green), calls a node answered (blue), errors (red), so
a bar's height is the hour's requests."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

HOURS = 7 * 24
COLORS = {"cache_hits": "#12b76a", "upstream": "#3e7bfa", "errors": "#d92d20"}


@dataclass(frozen=True, slots=True)
class Segment:
    y: float
    h: float
    n: int
    part: str  # cache_hits | upstream | errors
    color: str


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    n: int  # the hour's requests
    label: str
    segments: tuple[Segment, ...]


@dataclass(frozen=True, slots=True)
class Chart:
    width: int
    height: int
    bar_w: float
    bars: tuple[Bar, ...]
    peak: int
    first: str
    totals: dict[str, int]  # requests, errors, cache_hits over the 7 days


def hourly_chart(
    rows: Iterable[tuple[Any, ...]], now: float, *, width: int = 840, height: int = 90
) -> Chart | None:
    """One stacked bar per hour of the last 7 days from the store's hourly rows
    ``(hour, requests, errors, cache_hits, latency_ms_sum)``, the hour the
    window's start cuts first (its minutes inside the window: the bars add up
    to the KPIs); None when there is nothing to draw."""
    last = int(now) // 3600
    first = last - HOURS
    hours = {int(r[0]): (int(r[1]), int(r[2]), int(r[3])) for r in rows if first <= r[0] <= last}
    peak = max((n for n, _, _ in hours.values()), default=0)
    if peak <= 0:
        return None
    slot = width / (HOURS + 1)
    scale = (height - 2) / peak
    bars = []
    totals = {"requests": 0, "errors": 0, "cache_hits": 0}
    for i, hour in enumerate(range(first, last + 1)):
        if hour not in hours or not hours[hour][0]:
            continue
        n, errors, hits = hours[hour]
        totals["requests"] += n
        totals["errors"] += errors
        totals["cache_hits"] += hits
        parts = (("cache_hits", hits), ("upstream", max(0, n - errors - hits)), ("errors", errors))
        segments, bottom = [], float(height)
        for part, count in parts:
            if count <= 0:
                continue
            h = max(1.0, round(count * scale, 2))
            bottom -= h
            segments.append(Segment(round(bottom, 2), h, count, part, COLORS[part]))
        stamp = datetime.fromtimestamp(hour * 3600, UTC).strftime("%a %H:00 UTC")
        label = f"{stamp}: {n} requests, {errors} errors, {hits} cache hits"
        bars.append(Bar(round(i * slot, 2), n, label, tuple(segments)))
    start = datetime.fromtimestamp(first * 3600, UTC).strftime("%Y-%m-%d %H:00 UTC")
    return Chart(width, height, round(max(1.0, slot - 1), 2), tuple(bars), peak, start, totals)
