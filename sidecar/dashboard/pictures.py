"""The dashboard's small pictures as plain numbers for inline SVG (pure): an
endpoint's 24-hour latency sparkline, its 24-hour incident strip, and each
node's lag over the last hour. The templates only place what is computed here
(``templates/pictures.html``), so a test can check the numbers and the page.

Coordinates are in the SVG's own units (``viewBox``); y grows downwards.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sidecar.history.series import Point

SPARK_W, SPARK_H = 120, 24
STRIP_W, STRIP_H = 120, 10
LAG_W, LAG_H = 600, 120
PALETTE = ("#3e7bfa", "#12805c", "#c4320a", "#7a5af8", "#f79009", "#0e9384", "#dd2590")


@dataclass(frozen=True, slots=True)
class Spark:
    """A latency sparkline: ``lines`` are polylines (a gap splits the line),
    ``fails`` the x of points where probes failed, ``last_ms``/``peak_ms`` for words."""

    lines: tuple[str, ...]  # "x,y x,y …"
    fails: tuple[float, ...]
    values: tuple[int | None, ...]  # the points' mean latencies, rounded (the data drawn)
    last_ms: int | None
    peak_ms: int | None
    width: int = SPARK_W
    height: int = SPARK_H


def _x(i: int, n: int, width: float) -> float:
    return round(width * i / max(1, n - 1), 1)


def sparkline(points: Sequence[Point], width: int = SPARK_W, height: int = SPARK_H) -> Spark | None:
    """None when no point has a latency (nothing answered in 24 h: no line to draw)."""
    values = [None if p.latency_ms is None else round(p.latency_ms) for p in points]
    known = [v for v in values if v is not None]
    if not known:
        return None
    peak = max(known)
    top = max(peak, 1)
    lines: list[list[str]] = []
    current: list[str] = []
    for i, v in enumerate(values):
        if v is None:
            if current:
                lines.append(current)
            current = []
            continue
        y = round(height - 2 - (height - 4) * v / top, 1)  # 2 units of margin
        current.append(f"{_x(i, len(values), width)},{y}")
    if current:
        lines.append(current)
    drawn = tuple(" ".join(seg if len(seg) > 1 else _tick(seg[0])) for seg in lines)
    fails = tuple(_x(i, len(points), width) for i, p in enumerate(points) if p.fails)
    return Spark(drawn, fails, tuple(values), known[-1], peak, width, height)


def _tick(point: str) -> list[str]:
    """A lone point as a short level stroke ending at it, so it shows (a zero-length
    polyline draws nothing)."""
    x, y = point.split(",")
    return [f"{max(0.0, float(x) - 3):.1f},{y}", point]


@dataclass(frozen=True, slots=True)
class Band:
    x: float
    w: float
    label: str


def incident_strip(
    spans: Sequence[tuple[float, float | None]], now: float, *, span_s: float = 86_400,
    width: int = STRIP_W,
) -> tuple[Band, ...]:  # fmt: skip
    """The times an endpoint was down in the last ``span_s`` (incidents' start and
    end, None while ongoing) as bands on a strip ``width`` wide; each at least 1 wide."""
    since = now - span_s
    out = []
    for start, end in spans:
        end = now if end is None else end
        if end < since:
            continue
        lo, hi = max(start, since), min(end, now)
        x = round((lo - since) / span_s * width, 1)
        w = max(1.0, round((hi - lo) / span_s * width, 1))
        label = f"down {_hm(lo)} to {_hm(hi) if end < now else 'now'} UTC"
        out.append(Band(min(x, width - 1.0), w, label))
    return tuple(out)


def _hm(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%H:%M")


@dataclass(frozen=True, slots=True)
class LagLine:
    label: str
    color: str
    points: str  # "x,y …" of the minutes with a lag
    values: tuple[int | None, ...]  # the lag of each minute (the data drawn)
    last: int | None


@dataclass(frozen=True, slots=True)
class LagChart:
    lines: tuple[LagLine, ...]
    peak: int  # the y axis' top, in blocks
    width: int = LAG_W
    height: int = LAG_H


def lag_chart(series: Mapping[str, Sequence[int | None]]) -> LagChart | None:
    """One line per node (label → its lag per minute, oldest first); None when no
    node has a lag in the hour. The axis reaches at least 3 blocks, so a flat
    zero line sits at the bottom rather than filling the chart."""
    known = [v for vs in series.values() for v in vs if v is not None]
    if not known:
        return None
    peak = max(3, *known)
    lines = []
    for n, (label, values) in enumerate(series.items()):
        pts = [
            f"{_x(i, len(values), LAG_W)},{round(LAG_H - 4 - (LAG_H - 8) * v / peak, 1)}"
            for i, v in enumerate(values)
            if v is not None
        ]
        if len(pts) == 1:
            pts = _tick(pts[0])
        last = next((v for v in reversed(values) if v is not None), None)
        lines.append(LagLine(label, PALETTE[n % len(PALETTE)], " ".join(pts), tuple(values), last))
    return LagChart(tuple(lines), peak)
