"""The dashboard's truth in a real browser (headless Chromium): a sidecar
process with one endpoint that never answers (so it stays "not probed") and
one that is dead, fed a heartbeat over HTTP: the not-probed cell is readable
and unlike "down", the statistics' updated time shows while fresh, and the
network links narrow the page."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from chainproxy.supervisor import free_port
from tests.sidecar.deploy_files import REPO
from tests.sidecar.metrics_batch import batch_with_metrics

pytestmark = pytest.mark.e2e

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def sidecar_url(tmp_path: Path) -> Iterator[str]:
    # Accepts connections (the kernel's backlog) but never answers: the probe of
    # this endpoint is still waiting while the test looks at the page.
    with socket.create_server(("127.0.0.1", 0), backlog=16) as silent:
        port = free_port()
        raw = {
            "proxy": {"networks": ["finney", "test"]},
            "sidecar": {"port": port, "url": f"http://127.0.0.1:{port}"},
            "data_dir": str(tmp_path / "data"),
            "probe": {"interval_s": 60, "head_interval_s": 30, "timeout_s": 60},
            "registry": {
                "endpoints": [
                    {
                        "url": f"http://127.0.0.1:{silent.getsockname()[1]}/a.json",
                        "provider": "quiet",
                        "kind": "data-artifact",
                        "network": "finney",
                        "subnet": 1,
                    },
                    {
                        "url": f"http://127.0.0.1:{free_port()}",
                        "provider": "gone",
                        "kind": "node-rpc",
                        "network": "test",
                    },
                ]
            },
        }
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(raw))
        proc = subprocess.Popen(
            [sys.executable, "-m", "sidecar", "--config", str(path)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert proc.stdout is not None
            assert "sidecar listening on" in proc.stdout.readline()
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            proc.wait(10)


def post(url: str, body: object) -> int:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        return int(resp.status)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make installs it)")
def test_the_dashboard_tells_the_truth_in_a_browser(sidecar_url: str) -> None:
    from playwright.sync_api import sync_playwright

    heartbeat = batch_with_metrics({"proxy_id": "idle:1", "gauges": {}}, sent_at=time.time())
    assert post(f"{sidecar_url}/api/v1/internal/usage", heartbeat) == 200
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the dead node's first probe (within ~1 s)
        with urllib.request.urlopen(f"{sidecar_url}/api/v1/endpoints/root", timeout=5) as r:
            if json.load(r)["rows"][0]["classification"] != "unknown":
                break
        time.sleep(0.1)

    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        page = browser.new_page(viewport={"width": 1280, "height": 1200})
        page.goto(sidecar_url + "/", wait_until="load")

        usage = page.locator("#usage").inner_text()
        assert "Freshness unknown" not in usage
        assert "Statistics updated" in usage and " UTC (" in usage
        assert "ago)" in usage or "(just now)" in usage

        quiet = page.locator("#heatmap td.cell.np")
        assert quiet.inner_text() == "not probed"
        down = page.locator("#heatmap td.cell.b4")
        assert down.inner_text() == "down"
        style = "e => [getComputedStyle(e).color, getComputedStyle(e).backgroundColor]"
        fg, bg = quiet.evaluate(style)
        assert fg != bg and bg not in ("rgb(255, 255, 255)", "rgba(0, 0, 0, 0)")
        assert bg != down.evaluate(style)[1]  # not probed is not "down"
        assert "not probed yet" in page.locator("#heatmap .legend").inner_text()

        page.locator("nav.networks a", has_text="test").click()
        page.wait_for_load_state("load")
        assert page.url.endswith("/?network=test")
        assert "gone" in page.locator("#root-endpoints").inner_text()
        assert page.locator("#heatmap td.cell.np").count() == 0  # quiet is a finney endpoint
        browser.close()
