"""The 7-day window and the totals over it (pure).

**Window**: the last 7 days (604800 s): rollups with
``minute >= floor((now - 604800) / 60)``. ``WindowTotals`` is what a summary
needs of it: counts per (network, endpoint) and one merged latency histogram
per network. The store (``sidecar.usage.store``) keeps one current as the
window slides; ``totals_of`` computes it naively, as the reference.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from common.latency_hist import Hist, merge_into
from common.usage_wire import Counts, Rollup

WINDOW_S = 604_800


def window_start_minute(now: float, window_s: int = WINDOW_S) -> int:
    """The first minute inside the window ending at ``now``."""
    return math.floor((now - window_s) / 60)


@dataclass(slots=True)
class WindowTotals:
    """What the summary needs, for every network: counts per (network, endpoint
    or ``''`` for the cache) and one merged latency histogram per network."""

    counts: dict[tuple[str, str], Counts] = field(default_factory=dict)
    hists: dict[str, Hist] = field(default_factory=dict)

    def add_counts(self, network: str, endpoint: str, c: Counts | Rollup) -> None:
        self.counts.setdefault((network, endpoint), Counts()).add(c)

    def add_hist(self, network: str, hist: Mapping[int, int]) -> None:
        merge_into(self.hists.setdefault(network, {}), hist)

    def subtract(self, other: WindowTotals) -> None:
        """Remove ``other`` (data leaving the window); empty entries are dropped."""
        for key, c in other.counts.items():
            mine = self.counts.get(key)
            if mine is None:
                continue
            mine.requests -= c.requests
            mine.errors -= c.errors
            mine.failovers -= c.failovers
            mine.cache_hits -= c.cache_hits
            mine.latency_ms_sum = max(0.0, mine.latency_ms_sum - c.latency_ms_sum)
            if mine.requests <= 0:
                del self.counts[key]
        for net, hist in other.hists.items():
            mine_h = self.hists.get(net)
            if mine_h is None:
                continue
            for b, n in hist.items():
                left = mine_h.get(b, 0) - n
                if left > 0:
                    mine_h[b] = left
                else:
                    mine_h.pop(b, None)

    def copy(self) -> WindowTotals:
        return WindowTotals(
            {
                k: Counts(c.requests, c.errors, c.failovers, c.cache_hits, c.latency_ms_sum)
                for k, c in self.counts.items()
            },
            {net: dict(h) for net, h in self.hists.items()},
        )


def totals_of(rollups: Iterable[Rollup], now: float, window_s: int = WINDOW_S) -> WindowTotals:
    """The window totals computed naively from raw rollups (the reference the
    pre-aggregating store is checked against, and an in-memory backend)."""
    start = window_start_minute(now, window_s)
    out = WindowTotals()
    for r in rollups:
        if r.minute >= start:
            out.add_counts(r.network, r.endpoint or "", r)
            out.add_hist(r.network, r.hist)
    return out
