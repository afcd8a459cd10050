"""The dashboard's pictures in a real browser (headless Chromium, Playwright):
a sidecar holding a day of probe history, incidents and a week of usage,
built in-process on a clock the test moves, so the pictures have 24 hours and
7 days to show without waiting for them. The SVGs are drawn (non-empty boxes)
and carry the data; ``UPDATE_SCREENSHOTS=1`` writes docs/dashboard-pictures.png
(all networks) and docs/dashboard-network.png (one network's page)."""

from __future__ import annotations

import asyncio
import math
import os
import random
import shutil
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from common.config import parse_config
from sidecar.probing.results import ProbeResult
from sidecar.server.app import create_app
from sidecar.server.app_keys import HISTORY_KEY, PROBER_KEY
from tests.e2e.harness import REPO
from tests.fakes import FakeClock
from tests.sidecar.usage.stats.helpers import wire_rollup

pytestmark = pytest.mark.e2e
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DOCS = REPO / "docs"


def _config(tmp: Path) -> Any:
    def ep(port: int, provider: str, kind: str = "node-rpc", net: str = "finney", **kw: Any) -> Any:
        scheme = "ws" if kind == "node-wss" else "http"
        return {"url": f"{scheme}://127.0.0.1:{port}", "provider": provider, "kind": kind,
                "network": net, **kw}  # fmt: skip

    return parse_config(
        {
            "data_dir": str(tmp),
            "proxy": {"networks": ["finney", "test"]},
            "probe": {"fail_threshold": 2, "recover_threshold": 2},
            "registry": {
                "endpoints": [
                    ep(1, "opentensor"),
                    ep(2, "onfinality"),
                    ep(3, "dwellir", archive=True),
                    ep(4, "opentensor", "node-wss"),
                    ep(5, "opentensor", net="test"),
                    ep(6, "taostats", net="test"),
                    {"url": "https://data.example/sn12.json", "provider": "sn12-team",
                     "kind": "data-artifact", "network": "finney", "subnet": 12},
                ]
            },
        },
        env={},
    )  # fmt: skip


async def _fill(app: web.Application, config: Any, clock: FakeClock) -> dict[str, Any]:
    """A day of probes every 5 minutes (every minute in the last hour), a 40-minute
    outage of dwellir 3 hours ago and an ongoing one of the artifact, a lagging
    onfinality; a week of traffic with a daily rhythm."""
    rng = random.Random(27)
    prober, history = app[PROBER_KEY], app[HISTORY_KEY]
    by_name = {(e.provider, e.kind, e.network): e for e in config.endpoints}
    base = {"opentensor": 45, "onfinality": 120, "dwellir": 210, "taostats": 80}
    end = clock.t
    t = end - 86_400 + 120
    while t < end:
        clock.t = t
        hour_ago = end - t < 3600
        for (provider, kind, _net), e in by_name.items():
            if kind == "data-artifact":
                ok = end - t > 5400
                lat, best = (300 + rng.randint(0, 80)) if ok else None, None
            else:
                down = provider == "dwellir" and 10_800 < end - t < 13_200
                ok = not down
                wave = 1 + 0.35 * math.sin(t / 7200) + rng.random() * 0.25
                lat = round(base[provider] * wave) if ok else None
                tip = 4_000_000 + int((t - end) / 12)
                lag = rng.choice((0, 1, 1, 2, 4)) if provider == "onfinality" else 0
                best = (tip - lag) if ok else None
            r = ProbeResult(e.id, t, "head", "live" if ok else "dead", lat, best, None)
            prober.observe(e, r)
            history.observe(e, r, prober.health)
        t += 60 if hour_ago else 300
    clock.t = end
    rollups = []
    for h in range(7 * 24):
        minute = int((end - h * 3600) // 60) - 1
        daily = 1 + 0.6 * math.sin((end - h * 3600) / 86_400 * 2 * math.pi)
        n = max(5, int(60 * daily + rng.randint(0, 20)))
        for eid, share in ((by_name[("opentensor", "node-rpc", "finney")].id, 0.6),
                           (by_name[("onfinality", "node-rpc", "finney")].id, 0.4)):  # fmt: skip
            k = int(n * share)
            lats = [rng.uniform(20, 160) for _ in range(k)]
            rollups.append(wire_rollup(minute, lats, endpoint=eid, errors=rng.randint(0, k // 12)))
        rollups.append(wire_rollup(minute, [1.0] * int(n * 0.5), endpoint=None,
                                   cache_hits=int(n * 0.5)))  # fmt: skip
    return {"batch_id": "ef" * 16, "sent_at": end, "rollups": rollups}  # a usage batch


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make installs it)")
async def test_the_pictures_in_a_browser(aiohttp_server: Any, tmp_path: Path) -> None:
    from playwright.async_api import async_playwright

    clock = FakeClock()
    config = _config(tmp_path)
    app = create_app(config, probing=False, clock=clock)
    server = await aiohttp_server(app)
    batch = await _fill(app, config, clock)
    async with aiohttp.ClientSession() as s:
        r = await s.post(server.make_url("/api/v1/internal/usage"), json=batch)
        assert r.status == 200, await r.text()
    base = str(server.make_url("/"))
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--no-first-run"]
        )
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        await page.goto(base, wait_until="load")
        for sel, n in (("svg.spark", 7), ("svg.strip", 7), ("svg.chart", 1), ("svg.lag", 2)):
            boxes = [await el.bounding_box() for el in await page.query_selector_all(sel)]
            assert len(boxes) == n, sel
            assert all(b and b["width"] > 50 and b["height"] > 5 for b in boxes), sel
        downs = await page.locator("#callable svg.strip rect.down").count()
        assert downs == 2  # dwellir's outage and the artifact's ongoing one
        bars = await page.locator("svg.chart g.hour").count()
        assert 160 <= bars <= 168
        lines = await page.locator("svg.lag polyline.node").count()
        assert lines == 6  # finney: 3 rpc and 1 wss node; test: 2 (a chart each)
        shots = {"dashboard-pictures.png": base, "dashboard-network.png": base + "?network=finney"}
        for name, url in shots.items():
            await page.goto(url, wait_until="load")
            await page.locator("#callable").scroll_into_view_if_needed()
            out = tmp_path / name
            await page.screenshot(path=str(out), full_page=True)
            assert out.stat().st_size > 20_000
            if os.environ.get("UPDATE_SCREENSHOTS"):
                await asyncio.to_thread(shutil.copyfile, out, DOCS / name)
        await browser.close()
