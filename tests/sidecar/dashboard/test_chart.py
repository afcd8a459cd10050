"""The dashboard's inline-SVG chart numbers: requests, errors and cache hits per hour."""

from __future__ import annotations

from sidecar.dashboard.chart import HOURS, hourly_chart

NOW = 1_763_800_000.0
LAST = int(NOW) // 3600


def test_no_traffic_draws_nothing() -> None:
    assert hourly_chart([], NOW) is None
    assert hourly_chart([(LAST, 0, 0, 0, 0.0)], NOW) is None


def test_stacked_bars_scale_to_the_peak_and_sit_on_the_baseline() -> None:
    rows = [
        (LAST - HOURS - 5, 999, 0, 0, 0.0),  # before the window: not drawn
        (LAST - 1, 50, 0, 0, 500.0),
        (LAST, 100, 10, 30, 900.0),
    ]
    chart = hourly_chart(rows, NOW)
    assert chart is not None and chart.peak == 100
    assert chart.totals == {"requests": 150, "errors": 10, "cache_hits": 30}
    by_n = {b.n: b for b in chart.bars}
    assert set(by_n) == {100, 50}
    full = by_n[100]
    parts = {s.part: s for s in full.segments}
    assert {p: s.n for p, s in parts.items()} == {"cache_hits": 30, "upstream": 60, "errors": 10}
    # Stacked from the baseline: hits at the bottom, errors on top, the whole bar the peak.
    assert parts["cache_hits"].y + parts["cache_hits"].h == chart.height
    assert abs(sum(s.h for s in full.segments) - (chart.height - 2)) < 0.05
    assert parts["errors"].y < parts["upstream"].y < parts["cache_hits"].y
    assert abs(by_n[50].segments[0].h - (chart.height - 2) / 2) < 0.01
    assert full.x > by_n[50].x and full.x <= chart.width  # newest on the right
    assert "100 requests, 10 errors, 30 cache hits" in full.label


def test_the_hour_the_window_cuts_is_drawn_so_the_bars_add_up_to_the_kpis() -> None:
    """The store gives that hour only its minutes inside the window (the KPIs
    count them): drawn first, left of the oldest whole hour (a chart of 168
    bars left it out while the KPIs held it)."""
    rows = [(LAST - HOURS, 7, 0, 0, 0.0), (LAST - HOURS + 1, 5, 0, 0, 0.0), (LAST, 1, 0, 0, 0.0)]
    chart = hourly_chart(rows, NOW)
    assert chart is not None and chart.totals["requests"] == 13
    assert [b.n for b in sorted(chart.bars, key=lambda b: b.x)] == [7, 5, 1]
    assert min(b.x for b in chart.bars) == 0 and max(b.x for b in chart.bars) < chart.width
