"""The dashboard's inline-SVG chart numbers."""

from __future__ import annotations

from sidecar.dashboard.chart import HOURS, hourly_chart

NOW = 1_763_800_000.0
LAST = int(NOW) // 3600


def test_no_traffic_draws_nothing() -> None:
    assert hourly_chart([], NOW) is None
    assert hourly_chart([(LAST, 0)], NOW) is None


def test_bars_scale_to_the_peak_and_sit_on_the_baseline() -> None:
    chart = hourly_chart([(LAST, 100), (LAST - 1, 50), (LAST - HOURS - 5, 999)], NOW)
    assert chart is not None and chart.peak == 100  # only hours inside the window count
    by_n = {b.n: b for b in chart.bars}
    assert set(by_n) == {100, 50}  # the point before the window is not drawn
    assert by_n[100].h == chart.height - 2 and by_n[100].y + by_n[100].h == chart.height
    assert abs(by_n[50].h - (chart.height - 2) / 2) < 0.01
    assert by_n[100].x > by_n[50].x  # newest on the right
    assert by_n[100].x <= chart.width
