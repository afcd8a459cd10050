"""The dashboard after real traffic, in headless Chromium: simulated nodes, the
sidecar and mitmdump with the addon. The test sends calls on both networks,
block-pinned repeats (cache hits), an upstream's own error, a failover (a node
answering 503 at run time), a 429 (a client over a small rate limit) and kills
a node (an incident); once the usage has reached the sidecar, every table of
the page (loaded through the proxy) shows what was sent.
``UPDATE_SCREENSHOTS=1`` writes docs/dashboard.png from this state."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from common.config import FINNEY_GENESIS, TEST_GENESIS
from common.endpoint_id import endpoint_id
from tests.e2e.harness import REPO, Node, Stack, free_port, http_json
from tests.e2e.helpers import PROXY_DEFAULTS, Reply, call, next_client_ip, post

pytestmark = pytest.mark.e2e

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SCREENSHOT = REPO / "docs" / "dashboard.png"
RATE = 8  # proxy.rate_limit.requests: the ninth call of one client in a minute is a 429
DEAD_HOST = "127.0.0.2"  # gamma's own host: the timeline's host row is gamma's alone
# delta is the archive node, epsilon the test network's
HOSTS = {
    n: DEAD_HOST if n == "gamma" else "127.0.0.1"
    for n in ("alpha", "beta", "gamma", "delta", "epsilon")
}


@dataclass
class Sent:
    """What the proxy answered, counted from its answers' headers."""

    finney: int = 0
    test: int = 0
    hits: int = 0
    failovers: int = 0
    errors: int = 0

    @property
    def total(self) -> int:
        return self.finney + self.test

    def note(self, network: str, r: Reply) -> Reply:
        assert r.status == 200, (r.status, r.body)
        setattr(self, network, getattr(self, network) + 1)
        self.hits += r.headers["X-Cache"] == "HIT"
        self.failovers += r.headers.get("X-Chainproxy-Attempts", "1") != "1"
        self.errors += "error" in r.body
        return r


def _registry(nodes: dict[str, Node]) -> list[dict[str, Any]]:
    def entry(url: str, provider: str, kind: str = "node-rpc", **more: Any) -> dict[str, Any]:
        return {"url": url, "provider": provider, "kind": kind, "network": "finney", **more}

    a, b = nodes["alpha"], nodes["beta"]
    return [
        entry(a.url, "alpha"),
        entry(b.url, "beta"),
        entry(nodes["gamma"].url, "gamma"),
        entry(nodes["delta"].url, "delta", archive=True),
        entry(nodes["epsilon"].url, "epsilon", network="test"),
        entry(a.url.replace("http", "ws"), "alpha", "node-wss"),
        entry(f"{a.url}/_sim/state", "sn1-team", "data-artifact", subnet=1),
        entry(f"{b.url}/_sim/state", "sn7-team", "data-artifact", subnet=7),
    ]


def _start(tmp: Path) -> tuple[Stack, dict[str, Node]]:
    stack = Stack(tmp)
    epoch = time.time() - 600
    nodes = {
        name: stack.start_node(
            name,
            epoch=epoch,
            seed="test" if name == "epsilon" else "finney",
            genesis=TEST_GENESIS if name == "epsilon" else FINNEY_GENESIS,
            archive=name == "delta",
            host=host,
            wait=False,
        )
        for name, host in HOSTS.items()
    }
    stack.wait_nodes(nodes.values())
    port = free_port()
    stack.write_config(
        {
            "proxy": {
                "networks": ["finney", "test"],
                "rate_limit": {"requests": RATE, "window_s": 60},
                "usage": {"flush_s": 0.5},
                **PROXY_DEFAULTS,
            },
            "sidecar": {"port": port, "url": f"http://127.0.0.1:{port}"},
            "data_dir": str(tmp / "data"),
            "probe": {
                "interval_s": 2,
                "head_interval_s": 1,
                # gamma, stopped, refuses at once; a probe waits this long only
                # on a stall of the machine, which must not turn a live node
                # Degraded (every node but gamma is asserted OK)
                "timeout_s": 3,
                "fail_threshold": 2,
                "recover_threshold": 2,
            },
            "registry": {"endpoints": _registry(nodes)},
        }
    )
    stack.start_sidecar()
    stack.start_proxy()
    return stack, nodes


def _poll(what: str, probe: Any, timeout: float = 20) -> Any:
    """``probe()``'s first truthy answer; another process's state, so polled."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if got := probe():
            return got
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout} s")


def _routes_ready(stack: Stack) -> bool:
    for net, n in (("finney", 4), ("test", 1)):
        snap = http_json(f"{stack.sidecar_url}/api/v1/internal/routes/{net}")
        if snap["finalized"] is None or sum(u["healthy"] for u in snap["upstreams"]) != n:
            return False
    return True


async def _traffic(stack: Stack, nodes: dict[str, Node]) -> Sent:
    sent = Sent()
    fin, test = stack.rpc_url("finney"), stack.rpc_url("test")
    ip = next_client_ip()
    for body in (call("chain_getHeader"), call("system_health"), call("chain_getBlockHash", [100])):
        r = sent.note("finney", await post(fin, body, client_ip=ip))
    h100 = r.body["result"]
    assert h100.startswith("0x")
    # Block-pinned repeats: the block by hash is immutable, cached after the first.
    ip = next_client_ip()
    for i in range(5):
        r = sent.note("finney", await post(fin, call("chain_getBlock", [h100], i), client_ip=ip))
        assert r.headers["X-Cache"] == ("HIT" if i else "MISS") and r.body["id"] == i
    sent.note("finney", await post(fin, call("chain_getBlockHash", ["0x64"]), client_ip=ip))
    assert sent.hits >= 4
    # The test network: one node serves it.
    ip = next_client_ip()
    for body in (call("system_health"), call("chain_getHeader"), call("system_chain")):
        sent.note("test", await post(test, body, client_ip=ip))
    # The upstream's own error (invalid params): passed through, counted as an error.
    r = sent.note("finney", await post(fin, call("chain_getBlock", ["0x12"]), client_ip=ip))
    assert r.body["error"]["code"] == -32602 and sent.errors == 1
    # A failover: the node that just served a call (the one the proxy's choice
    # favours) answers 503 until a call meets it first and goes on elsewhere.
    by_id = {endpoint_id(n.url): n for n in nodes.values()}
    deadline = time.monotonic() + 10
    while not sent.failovers and time.monotonic() < deadline:
        r = sent.note(
            "finney", await post(fin, call("chain_getHeader"), client_ip=next_client_ip())
        )
        favoured = by_id[r.headers["X-Chainproxy-Upstream"]]
        favoured.control(http_status=503)
        try:
            for _ in range(5):
                r = await post(fin, call("chain_getHeader"), client_ip=next_client_ip())
                sent.note("finney", r)
                if sent.failovers:
                    assert r.headers["X-Chainproxy-Upstream"] != endpoint_id(favoured.url)
                    break
        finally:
            favoured.reset()
    assert sent.failovers == 1, "no call met the failing node"
    # A 429: one client over the rate limit.
    ip = next_client_ip()
    for i in range(RATE):
        sent.note("finney", await post(fin, call("system_health", id_=i), client_ip=ip))
    r = await post(fin, call("system_health", id_="over"), client_ip=ip)
    assert r.status == 429 and r.body["id"] == "over" and r.body["error"]["code"] == -32005
    assert int(r.headers["Retry-After"]) > 0
    return sent


def _gamma_incident(stack: Stack, gamma_id: str) -> bool:
    doc = http_json(f"{stack.sidecar_url}/api/v1/incidents")
    return any(
        i["endpoint"] == gamma_id and i["state"] == "ongoing" and i["message"] == "dead"
        for i in doc["incidents"]
    )


def _usage_arrived(stack: Stack, sent: Sent) -> dict[str, Any] | None:
    doc = http_json(f"{stack.proxy_url}/api/v1/usage")
    assert doc["requests"] <= sent.total, doc  # never more than was answered
    return doc if doc["requests"] == sent.total else None


def _rows(page: Any, selector: str) -> list[list[str]]:
    """The cells' texts of each body row of the table at ``selector``."""
    return [
        [c.strip() for c in row.locator("td").all_inner_texts()]
        for row in page.locator(f"{selector} tbody tr").all()
    ]


def _num(text: str) -> int:
    return int(text.replace(",", ""))


def _rate_limited(stack: Stack) -> int:
    """Calls refused with 429, as the proxy's live metrics at the sidecar count them."""
    with urllib.request.urlopen(f"{stack.sidecar_url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in text.splitlines()
        if line.startswith("chainproxy_requests_total{") and 'outcome="rate_limited"' in line
    )


def _check_usage(page: Any, sent: Sent, usage: dict[str, Any]) -> None:
    """The KPIs, the by-network, by-endpoint and top-methods tables say what
    was sent."""
    kpis = dict(
        zip(
            page.locator("#usage .kpi span").all_inner_texts(),
            page.locator("#usage .kpi b").all_inner_texts(),
            strict=True,
        )
    )
    assert _num(kpis["requests"]) == sent.total
    assert f"cache hits · {sent.hits}" in kpis
    assert f"failover · {sent.failovers}" in kpis
    assert f"errors · {sent.errors}" in kpis
    assert f"success · {sent.total - sent.errors}" in kpis
    assert kpis["p50 latency"].endswith(" ms") and kpis["p95 latency"].endswith(" ms")
    assert "Freshness unknown" not in page.locator("#usage").inner_text()
    by_net = _rows(page, "#usage table:has(caption:text('By network'))")
    assert {n: _num(c) for n, c in by_net} == {"finney": sent.finney, "test": sent.test}
    by_ep = _rows(page, "#usage table:has(caption:text('By endpoint'))")
    shown = {r[0]: (r[1], _num(r[2])) for r in by_ep}
    assert shown == {e["endpoint"]: (e["provider"], e["requests"]) for e in usage["endpoints"]}
    assert shown["epsilon-test-rpc"] == ("epsilon", sent.test)
    assert sum(n for _, n in shown.values()) == sent.total - sent.hits
    # the failover: the node that served a call, then another of finney's (which
    # ones is the proxy's choice; delta, an archive, is one of them)
    assert len(set(shown) - {"epsilon-test-rpc"}) >= 2, shown
    # the methods by quota units: plain reads cost a unit each, so as many as calls
    top = _rows(page, "#usage table:has(caption:text('Top methods by quota units'))")
    shown_top = [(r[0], _num(r[1]), _num(r[2])) for r in top]
    assert shown_top == [(m["method"], m["requests"], m["units"]) for m in usage["methods"]]
    assert {"chain_getHeader", "chain_getBlock", "system_health"} <= {m for m, _, _ in shown_top}
    assert all(units == n for _, n, units in shown_top), shown_top
    # Beside the longer endpoint table, the network table's rows keep their height.
    net_row, ep_row = (
        page.locator(f"#usage table:has(caption:text('{c}')) tbody tr").first
        for c in ("By network", "By endpoint")
    )
    assert net_row.bounding_box()["height"] == ep_row.bounding_box()["height"]


def _check_incident(page: Any, gamma: str) -> Any:
    """The dead node: Degraded in the root list, its incident, its timeline rows;
    the host row's link (returned)."""
    root = {r[0]: r for r in _rows(page, "#root-endpoints")}
    assert root["gamma"][2:4] == ["dead", "Degraded"]
    assert all(r[3] == "OK" for p, r in root.items() if p != "gamma")
    incidents = _rows(page, "#incidents > table")
    mine = next(r for r in incidents if r[1] == gamma)
    assert mine[0] == "Degraded" and mine[2] == "ongoing" and mine[5] == "dead"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:]+Z", mine[3]), mine
    assert [gamma, "1", "1"] in _rows(page, "#incidents table:has(caption:text('By endpoint'))")
    hosts = page.locator("#incidents table:has(caption:text('By host')) tbody tr")
    host = hosts.filter(has_text=DEAD_HOST)
    assert host.locator("td").all_inner_texts()[:3] == [DEAD_HOST, "1", "1"]
    links = host.locator("a")
    assert links.all_inner_texts() == [gamma[-6:]]  # gamma is the host's one endpoint
    assert links.first.get_attribute("href") == f"/api/v1/endpoints/{gamma}"
    return links.first


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (make installs it)")
def test_dashboard_after_real_traffic(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    stack, nodes = _start(tmp_path)
    try:
        gamma = endpoint_id(nodes["gamma"].url)
        _poll("every node probed healthy", lambda: _routes_ready(stack))
        sent = asyncio.run(_traffic(stack, nodes))
        nodes["gamma"].proc.stop()  # gamma dies: the probes open an incident
        _poll("gamma's incident", lambda: _gamma_incident(stack, gamma))
        usage = _poll("usage at the sidecar", lambda: _usage_arrived(stack, sent))
        assert usage["by_network"] == {"finney": sent.finney, "test": sent.test}
        assert usage["cache_hits"]["count"] == sent.hits
        assert usage["failover"]["count"] == sent.failovers
        assert usage["errors"]["count"] == sent.errors == 1
        # The 429 is no usage record (nothing was answered) but a live metric.
        assert _poll("the 429 in /metrics", lambda: _rate_limited(stack)) == 1

        with sync_playwright() as pw:
            args = ["--no-sandbox", "--disable-gpu"]
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=args)
            page = browser.new_page(viewport={"width": 1280, "height": 1200})
            page.goto(stack.proxy_url + "/", wait_until="load")  # through the proxy
            # Every table has rows, none of them an "empty" placeholder.
            tables = page.locator("main table")
            assert tables.count() == 11
            for t in tables.all():
                assert t.locator("tbody tr").count() >= 1, t.inner_html()[:300]
                assert t.locator("td.empty").count() == 0, t.inner_text()
            _check_usage(page, sent, usage)
            link = _check_incident(page, gamma)

            shot = SCREENSHOT if os.environ.get("UPDATE_SCREENSHOTS") else tmp_path / "d.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000

            # The host row's link opens that endpoint's document (through the proxy).
            link.click()
            page.wait_for_load_state("load")
            doc = json.loads(page.locator("body").inner_text())
            assert doc["id"] == gamma and doc["incidents"][0]["message"] == "dead"
            browser.close()
    finally:
        stack.stop()
