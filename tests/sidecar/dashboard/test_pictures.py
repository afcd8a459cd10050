"""The dashboard's pictures carry the data: probe history folded per minute,
kept a day (and across a restart), read back as sparklines, incident strips,
lag lines and the 7-day usage bars, and the page's SVGs hold those numbers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from common.config import Config, parse_config
from sidecar.dashboard.pictures import incident_strip, lag_chart, sparkline
from sidecar.history.series import Minute, Point, lag_of, lag_series, latency_series
from sidecar.history.store import HistoryStore
from sidecar.probing.health import Health
from sidecar.probing.results import ProbeResult
from sidecar.server.app import create_app
from sidecar.server.app_keys import HISTORY_KEY, PROBER_KEY
from tests.fakes import FakeClock
from tests.sidecar.usage.stats.helpers import wire_rollup


def _config(tmp: Path) -> Config:
    nodes = [("alpha", 1), ("beta", 2), ("gamma", 3)]
    return parse_config(
        {
            "data_dir": str(tmp),
            "proxy": {"networks": ["finney"]},
            "probe": {"fail_threshold": 2, "recover_threshold": 2},
            "registry": {
                "endpoints": [
                    {"url": f"http://127.0.0.1:{p}", "provider": n, "kind": "node-rpc",
                     "network": "finney"}
                    for n, p in nodes
                ]
            },
        },
        env={},
    )  # fmt: skip


# --- pure ------------------------------------------------------------------------------------


def test_minutes_fold_into_fixed_series_with_gaps() -> None:
    now = 1_800_000_000.0
    last = int(now // 60)
    minutes = {
        last: Minute(2, 0, 80.0, 2),
        last - 20: Minute(1, 1, 0.0, 0),
        last - 1439: Minute(1, 0, 10.0, 1),
    }
    pts = latency_series(minutes, now)
    assert len(pts) == 96
    assert pts[-1] == Point(40.0, 2, 0) and pts[0] == Point(10.0, 1, 0)
    assert pts[-2] == Point(None, 1, 1)  # probes failed there: no latency, a failure mark
    assert all(p.latency_ms is None for p in pts[1:-2])
    m = Minute()
    m.add(True, 30, 2)
    m.add(True, 50, 5)
    m.add(False, None, None)
    assert (m.probes, m.fails, m.latency_sum, m.latency_n, m.lag_max) == (3, 1, 80.0, 2, 5)
    lags = lag_series({last: Minute(1, 0, 0, 0, 4), last - 59: Minute(1, 0, 0, 0, 1)}, now)
    assert len(lags) == 60 and lags[0] == 1 and lags[-1] == 4 and lags[1:-1] == [None] * 58


def test_lag_is_against_the_healthy_tip(tmp_path: Path) -> None:
    a, b, c = _config(tmp_path).endpoints
    health = {a.id: Health(status="OK", best=100), c.id: Health(status="Degraded", best=500)}
    ok = ProbeResult(b.id, 1.0, "head", "live", 20, 97)
    assert lag_of(ok, b, (a, b, c), health) == 3  # c is unhealthy: not the tip
    ahead = ProbeResult(b.id, 1.0, "head", "live", 20, 103)
    assert lag_of(ahead, b, (a, b, c), health) == 0
    assert lag_of(ProbeResult(b.id, 1.0, "head", "dead"), b, (a, b, c), health) is None


def test_picture_numbers() -> None:
    spark = sparkline([Point(100.0, 1, 0), Point(None, 0, 0), Point(50.0, 2, 1), Point(25.0, 1, 0)])
    assert spark is not None and spark.values == (100, None, 50, 25)
    assert len(spark.lines) == 2  # the gap splits the line
    first, second = spark.lines
    assert first.split() == ["0.0,2.0", "0.0,2.0"]  # the peak at the top margin, a lone point
    lone = sparkline([Point(None, 0, 0), Point(None, 0, 0), Point(30.0, 1, 0)])
    assert lone is not None and lone.lines == ("117.0,2.0 120.0,2.0",)  # a visible stroke
    assert [p.split(",")[1] for p in second.split()] == ["12.0", "17.0"]  # 50 and 25 ms
    assert spark.fails == (80.0,) and (spark.last_ms, spark.peak_ms) == (25, 100)
    assert sparkline([Point(None, 3, 3)]) is None
    now = 1_800_000_000.0
    bands = incident_strip(
        [(now - 43_200, now - 21_600), (now - 3600, None), (now - 99_999, now - 90_000)], now
    )
    assert [(b.x, b.w) for b in bands] == [(60.0, 30.0), (115.0, 5.0)]
    assert bands[1].label.endswith("to now UTC")
    chart = lag_chart({"alpha": [0, 0, 1, None], "beta": [None, 6, None, 2]})
    assert chart is not None and chart.peak == 6
    assert chart.lines[1].values == (None, 6, None, 2) and chart.lines[1].last == 2
    assert chart.lines[1].points.split()[0].endswith(",4.0")  # 6 blocks: the top
    assert lag_chart({"alpha": [None, None]}) is None


def test_history_store_keeps_a_day_across_a_restart(tmp_path: Path) -> None:
    now = 1_800_000_000.0
    minute = int(now // 60)
    store = HistoryStore(tmp_path / "h.sqlite3")
    store.add({("e1", minute): Minute(1, 0, 40.0, 1, 2)}, now)
    store.add({("e1", minute): Minute(2, 1, 60.0, 1, 5), ("e1", minute - 2000): Minute(1)}, now)
    store.close()
    again = HistoryStore(tmp_path / "h.sqlite3")
    got = again.minutes(["e1", "e2"], minute - 3000)
    assert got["e2"] == {} and set(got["e1"]) == {minute}  # the minute past a day was dropped
    assert got["e1"][minute] == Minute(3, 1, 100.0, 2, 5)


# --- the page --------------------------------------------------------------------------------


def _svgs(html: str, cls: str) -> list[str]:
    return re.findall(rf'<svg class="{cls}".*?</svg>', html, flags=re.S)


async def test_the_page_draws_the_history(aiohttp_client: Any, tmp_path: Path) -> None:
    clock = FakeClock()
    config = _config(tmp_path)
    a, b, c = config.endpoints
    app = create_app(config, probing=False, clock=clock)
    client = await aiohttp_client(app)
    history, prober = app[HISTORY_KEY], app[PROBER_KEY]

    def probe(e: Any, ok: bool, lat: int = 0, best: int = 0) -> None:
        r = ProbeResult(e.id, clock.t, "head", "live" if ok else "dead", lat if ok else None,
                        best if ok else None)  # fmt: skip
        prober.observe(e, r)
        history.observe(e, r, prober.health)

    # A day ago alpha answered in 100 ms; for the last hour in 50 ms, beta 3 blocks behind.
    start = clock.t
    clock.t = start + 600
    probe(a, True, 100, 1000)
    clock.t = start + 82_800
    for i in range(60):
        probe(a, True, 50, 2000 + i)
        probe(b, True, 70, 1997 + i)
        probe(c, i < 30, 60, 2000 + i)  # gamma fails for the last half hour: an incident
        clock.advance(60)
    batch = {"batch_id": "cd" * 16, "sent_at": clock.t, "rollups": [
        wire_rollup(int(clock.t // 60) - 2, [10, 20, 30], endpoint=a.id, errors=1),
        wire_rollup(int(clock.t // 60) - 1, [1, 1], endpoint=None, cache_hits=2),
    ]}  # fmt: skip
    assert (await client.post("/api/v1/internal/usage", json=batch)).status == 200

    html = await (await client.get("/?network=finney")).text()
    sparks = _svgs(html, "spark")
    assert len(sparks) == 3
    values = re.search(r'data-values="([^"]*)"', sparks[0]).group(1).split(",")  # alpha's row
    assert len(values) == 96 and values[0] == "100" and values[-1] == "50"
    assert re.findall(r"<polyline", sparks[0]) and "last 50 ms, peak 100 ms" in sparks[0]
    strips = _svgs(html, "strip")
    assert len(strips) == 3 and 'class="down"' not in strips[0]
    down = re.findall(r'<rect class="down" x="([\d.]+)" y="0" width="([\d.]+)"', strips[2])
    assert len(down) == 1 and 117 <= float(down[0][0]) <= 119  # the last ~30 minutes of 24 h
    lag = _svgs(html, "lag")
    assert len(lag) == 1
    lines = dict(re.findall(r'data-label="([^"]+)" data-values="([^"]*)"', lag[0]))
    assert set(lines) == {"alpha rpc", "beta rpc", "gamma rpc"}
    # The current minute has no probe yet (a gap); the minutes before it do.
    assert lines["beta rpc"].split(",")[-6:] == ["3"] * 5 + [""]
    assert lines["alpha rpc"].split(",")[-2] == "0"
    assert lines["gamma rpc"].split(",")[-2] == ""  # failing: no lag known, a gap
    assert lines["gamma rpc"].split(",")[-40] == "0"  # before it failed
    usage = _svgs(html, "chart")
    assert len(usage) == 1
    drawn: dict[str, int] = {}
    for part, n in re.findall(r'class="(cache_hits|upstream|errors)"[^>]*data-n="(\d+)"', usage[0]):
        drawn[part] = drawn.get(part, 0) + int(n)
    assert drawn == {"cache_hits": 2, "upstream": 2, "errors": 1}  # 5 requests, stacked
