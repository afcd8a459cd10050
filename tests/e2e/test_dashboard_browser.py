"""The dashboard in a real browser (headless Chromium driven by Playwright):
a sidecar fed by simulated nodes, one of them dead, and a 60-endpoint registry."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import Stack, free_port, http_json

pytestmark = pytest.mark.e2e

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _registry(stack: Stack) -> list[dict[str, Any]]:
    roots = [
        {
            "url": n.url,
            "provider": n.name,
            "kind": "node-rpc",
            "network": "finney",
            "subnet": 0,
            "archive": n.name == "archive",
        }
        for n in stack.nodes
    ]
    dead = free_port()  # nobody listens: these subnet endpoints are probed "dead"
    subnets = [
        {
            "url": f"http://127.0.0.1:{dead}/sn{i}/artifact.json",
            "provider": f"sn{i}-team",
            "kind": "data-artifact" if i % 3 else "sse",
            "network": "finney",
            "subnet": i,
        }
        for i in range(1, 58)
    ]
    return roots + subnets  # 3 + 57 = 60 endpoints


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make installs it)")
def test_dashboard_in_a_browser(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    stack = Stack(tmp_path)
    try:
        epoch = time.time() - 600
        stack.wait_nodes(
            [
                stack.start_node(name, epoch=epoch, archive=name == "archive", wait=False)
                for name in ("alpha", "archive", "gamma")
            ]
        )
        port = free_port()
        stack.write_config(
            {
                "proxy": {"networks": ["finney", "test"]},
                "sidecar": {"port": port, "url": f"http://127.0.0.1:{port}"},
                "data_dir": str(tmp_path / "data"),
                "probe": {
                    "interval_s": 1,
                    "head_interval_s": 0.5,
                    "timeout_s": 1,
                    "fail_threshold": 2,
                    "recover_threshold": 2,
                },
                "registry": {"endpoints": _registry(stack)},
            }
        )
        stack.start_sidecar()
        stack.nodes[2].proc.stop()  # gamma dies
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            doc = http_json(f"{stack.sidecar_url}/api/v1/incidents")
            if any(i["state"] == "ongoing" and i["message"] == "dead" for i in doc["incidents"]):
                break
            time.sleep(0.3)
        else:
            raise AssertionError("no incident opened for the dead node")

        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=CHROMIUM,
                args=[
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--no-first-run",
                    "--disable-sync",
                ],
            )
            page = browser.new_page(viewport={"width": 1280, "height": 1500})
            page.goto(stack.sidecar_url + "/", wait_until="load")
            headings = [h.strip() for h in page.locator("section > h2").all_inner_texts()]
            order = [
                "Proxy usage",
                "Registry",
                "RPC pools",
                "Endpoint pools",
                "Root RPC/WSS endpoints",
                "Callable endpoints",
                "Latency heatmap",
                "Incidents",
            ]
            assert [next(h for h in headings if h.startswith(o)) for o in order]
            starts = [min(i for i, h in enumerate(headings) if h.startswith(o)) for o in order]
            assert starts == sorted(starts), headings
            # Freshness note: nothing was ever ingested.
            assert "Freshness unknown" in page.locator("#usage").inner_text()
            # The dead root node is Degraded, with an ongoing incident saying "dead".
            root = page.locator("#root-endpoints tbody tr", has_text="gamma")
            assert "Degraded" in root.inner_text() and "dead" in root.inner_text()
            incident = page.locator("#incidents tbody tr", has_text="ongoing").first
            assert "dead" in incident.inner_text()
            # Heatmap: colours by bucket, and a legend with the four buckets.
            cells = page.locator("#heatmap td.cell")
            assert cells.count() >= 3
            colours = {
                c.get_attribute("class").split()[-1]: c.evaluate(
                    "e => getComputedStyle(e).backgroundColor"
                )
                for c in cells.all()
            }
            assert "b1" in colours and "b4" in colours  # fast local nodes, dead subnets
            assert colours["b1"] != colours["b4"]
            # four latency buckets and "not probed" (a cell without a probe yet)
            assert page.locator("#heatmap .legend span").count() == 5
            # Callable list: 60 endpoints, page 2 shows rows 26-50.
            assert "60 of 60" in page.locator("#callable h2").inner_text()
            # docs/dashboard.png comes from the page with traffic
            # (test_dashboard_traffic_browser.py); this one stays in tmp.
            shot = tmp_path / "d.png"
            page.screenshot(path=str(shot), full_page=False)
            assert shot.stat().st_size > 10_000
            page.locator("#callable .pager a", has_text="2").first.click()
            page.wait_for_load_state("load")
            assert "page=2" in page.url
            rows = page.locator("#callable tbody tr")
            assert rows.count() == 25
            subnets = [rows.nth(i).locator("td").first.inner_text() for i in range(25)]
            assert subnets[0] == "023" and subnets[-1] == "047"  # rows 26 and 50
            browser.close()
        bad = http_json_status(f"{stack.sidecar_url}/?page=9")
        assert bad == 404
    finally:
        stack.stop()


def http_json_status(url: str) -> int:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code
