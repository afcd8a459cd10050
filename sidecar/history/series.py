"""Probe results folded into per-minute buckets, and read back as series (pure).

A **minute** of one endpoint holds how many probes ran, how many failed, the
sum and count of the successful ones' latencies and the largest lag seen
(tip - the node's best, the tip taken over the network's healthy nodes and
the probe itself, so a node ahead of the others has lag 0). A **series** is
a fixed number of points over a span ending now, oldest first; a point with
no probe is None (a gap in the picture, never a made-up value).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from common.config import Endpoint
from sidecar.probing.health import Health, chain_heads
from sidecar.probing.results import NODE_KINDS, ProbeResult

KEEP_S = 86_400  # a day: the sparklines' and incident strips' span


@dataclass(slots=True)
class Minute:
    probes: int = 0
    fails: int = 0
    latency_sum: float = 0.0
    latency_n: int = 0
    lag_max: int | None = None

    def add(self, ok: bool, latency_ms: int | None, lag: int | None) -> None:
        self.probes += 1
        if not ok:
            self.fails += 1
        elif latency_ms is not None:
            self.latency_sum += latency_ms
            self.latency_n += 1
        if lag is not None and (self.lag_max is None or lag > self.lag_max):
            self.lag_max = lag


def lag_of(
    result: ProbeResult, endpoint: Endpoint, nodes: Iterable[Endpoint], health: Mapping[str, Health]
) -> int | None:
    """The node's lag at this probe; None for a failed probe or a non-node."""
    if endpoint.kind not in NODE_KINDS or result.best is None or not result.ok:
        return None
    tip, _ = chain_heads((e for e in nodes if e.network == endpoint.network), health)
    top = result.best if tip is None else max(tip, result.best)
    return top - result.best


@dataclass(frozen=True, slots=True)
class Point:
    latency_ms: float | None  # mean of the successful probes in the point's span
    probes: int
    fails: int


def latency_series(
    minutes: Mapping[int, Minute], now: float, *, span_s: int = KEEP_S, points: int = 96
) -> list[Point]:
    """``points`` points over ``span_s`` ending at ``now`` (96 x 15 min by default)."""
    step = span_s // points // 60  # minutes per point
    last = int(now // 60)
    first = last - step * points + 1
    out = []
    for i in range(points):
        lo = first + i * step
        lat_sum, lat_n, probes, fails = 0.0, 0, 0, 0
        for m in range(lo, lo + step):
            b = minutes.get(m)
            if b is not None:
                lat_sum, lat_n = lat_sum + b.latency_sum, lat_n + b.latency_n
                probes, fails = probes + b.probes, fails + b.fails
        out.append(Point(lat_sum / lat_n if lat_n else None, probes, fails))
    return out


def lag_series(minutes: Mapping[int, Minute], now: float, *, points: int = 60) -> list[int | None]:
    """The largest lag of each of the last ``points`` minutes (None: no probe answered)."""
    last = int(now // 60)
    return [
        (b.lag_max if (b := minutes.get(m)) is not None else None)
        for m in range(last - points + 1, last + 1)
    ]
