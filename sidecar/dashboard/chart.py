"""The dashboard's requests-over-time chart as plain numbers for inline SVG
(pure: no JavaScript, readable in any browser)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

HOURS = 7 * 24


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    y: float
    h: float
    n: int
    label: str


@dataclass(frozen=True, slots=True)
class Chart:
    width: int
    height: int
    bar_w: float
    bars: tuple[Bar, ...]
    peak: int
    first: str


def hourly_chart(
    points: list[tuple[int, int]], now: float, *, width: int = 840, height: int = 90
) -> Chart | None:
    """One bar per hour of the last 7 days from (hour, requests) points;
    None when there is nothing to draw."""
    if not points:
        return None
    last = int(now) // 3600
    first = last - HOURS + 1
    counts = {h: n for h, n in points if first <= h <= last}
    peak = max(counts.values(), default=0)
    if peak <= 0:
        return None
    slot = width / HOURS
    bars = []
    for i, hour in enumerate(range(first, last + 1)):
        n = counts.get(hour, 0)
        if not n:
            continue
        h = max(1.0, n / peak * (height - 2))
        label = datetime.fromtimestamp(hour * 3600, UTC).strftime("%a %H:00 UTC")
        bars.append(Bar(round(i * slot, 2), round(height - h, 2), round(h, 2), n, label))
    start = datetime.fromtimestamp(first * 3600, UTC).strftime("%Y-%m-%d %H:00 UTC")
    return Chart(width, height, round(max(1.0, slot - 1), 2), tuple(bars), peak, start)
