"""The 7-day window and its totals."""

from __future__ import annotations

from common.usage_wire import Counts, Rollup
from sidecar.usage.stats.window import (
    WINDOW_S,
    WindowTotals,
    totals_of,
    window_start_minute,
)
from tests.sidecar.usage.stats.helpers import EP_A, MINUTE, NOW


def test_window_start_minute_and_cut_off() -> None:
    assert window_start_minute(NOW) == MINUTE - WINDOW_S // 60
    assert window_start_minute(NOW + 59) == MINUTE - WINDOW_S // 60
    assert window_start_minute(NOW + 60) == MINUTE - WINDOW_S // 60 + 1
    first = window_start_minute(NOW)
    rollups = [
        Rollup(first - 1, "finney", EP_A, "m", 1, hist={10: 1}),
        Rollup(first, "finney", EP_A, "m", 2, hist={10: 2}),
        Rollup(MINUTE, "test", None, "m", 4, cache_hits=4, hist={0: 4}),
    ]
    t = totals_of(rollups, NOW)
    assert t.counts[("finney", EP_A)].requests == 2
    assert t.counts[("test", "")].cache_hits == 4
    assert ("finney", EP_A) not in totals_of(rollups, NOW + 60).counts


def test_window_totals_subtract_and_copy() -> None:
    t = WindowTotals()
    t.add_counts("finney", EP_A, Counts(5, 1, 1, 0, 50.0))
    t.add_hist("finney", {10: 3, 20: 2})
    copy = t.copy()
    leaving = WindowTotals()
    leaving.add_counts("finney", EP_A, Counts(5, 1, 1, 0, 50.0))
    leaving.add_hist("finney", {10: 3, 20: 1})
    t.subtract(leaving)
    assert t.counts == {} and t.hists == {"finney": {20: 1}}
    assert copy.counts[("finney", EP_A)].requests == 5  # the copy is independent
