"""Secrets in upstream URLs never reach the dashboard.

Upstream URLs carry a userinfo name and password, key-like query values and a
key-like path segment; after real traffic (HTTP and WebSocket, so the usage
tables are filled) and an incident (an endpoint nobody listens on), every HTML
page the sidecar serves is fetched, through the proxy and directly: the
dashboard (each network, each callable-list page), its error pages, and every
same-site link found on them, followed two levels (the endpoint pages, the
JSON API, /metrics). None contains any of the secrets; the redacted URLs are
shown instead."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import aiohttp
import pytest

from common.endpoint_id import endpoint_id
from tests.e2e.harness import Stack, free_port, http_json
from tests.e2e.helpers import PROXY_DEFAULTS, call, post

pytestmark = pytest.mark.e2e

SECRETS = (
    "UserKey7a8b9c0d1e2f3a4b",  # a userinfo name (some providers put the key there)
    "hunter2pass",  # a userinfo password
    "QUERYKEY0123456789",  # ?apikey=
    "pathkey0a1b2c3d4e5f6a7b8c9d0e1f2",  # a key-like path segment
    "TOKENabcdef987654321",  # ?token= of an endpoint that is down (the incident)
    "WsKey55aa66bb77cc88dd",  # ?api_key= of a WebSocket endpoint
    "ArtifactSecret0123abcd",  # ?access_token= of a data artifact
)
HREF = re.compile(r'href="([^"]+)"')


async def _wait(what: str, check, timeout: float = 30) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.3)


async def _crawl(session: aiohttp.ClientSession, base: str, starts: list[str]) -> dict[str, str]:
    """Every same-site page reachable from ``starts`` within two links: url -> body."""
    seen: dict[str, str] = {}
    frontier = [urljoin(base, s) for s in starts]
    for _depth in range(3):
        nxt: list[str] = []
        for url in frontier:
            if url in seen or len(seen) >= 300:
                continue
            async with session.get(url, timeout=aiohttp.ClientTimeout(total=15)) as r:
                body = await r.text(errors="replace")
            seen[url] = body
            if "html" in r.headers.get("Content-Type", ""):
                for href in HREF.findall(body):
                    link = urljoin(url, href.replace("&amp;", "&"))
                    if urlsplit(link).netloc == urlsplit(base).netloc:
                        nxt.append(link.split("#")[0])
        frontier = nxt
    return seen


async def test_no_secret_on_any_dashboard_page(tmp_path: Path) -> None:
    stack = Stack(tmp_path)
    try:
        epoch = time.time() - 600
        a, b = stack.start_nodes(("alpha", "beta"), epoch=epoch)
        a_port = a.url.rsplit(":", 1)[1]
        dead = free_port()
        endpoints = [
            (
                a.url.replace("http://", f"http://{SECRETS[0]}:{SECRETS[1]}@")
                + f"/?apikey={SECRETS[2]}",
                "node-rpc",
                0,
            ),
            (f"{b.url}/{SECRETS[3]}", "node-rpc", 0),
            (f"http://127.0.0.1:{dead}/?token={SECRETS[4]}", "node-rpc", 0),
            (f"ws://127.0.0.1:{a_port}/ws?api_key={SECRETS[5]}", "node-wss", 0),
            (f"{a.url}/_sim/state?access_token={SECRETS[6]}", "data-artifact", 1),
        ]
        sidecar_port = free_port()
        stack.write_config(
            {
                "proxy": {"networks": ["finney"], "usage": {"flush_s": 0.5}, **PROXY_DEFAULTS},
                "sidecar": {"port": sidecar_port, "url": f"http://127.0.0.1:{sidecar_port}"},
                "data_dir": str(tmp_path / "data"),
                "probe": {"interval_s": 0.5, "head_interval_s": 0.3, "timeout_s": 1},
                "registry": {
                    "endpoints": [
                        {
                            "url": u,
                            "provider": f"p{i}",
                            "kind": kind,
                            "network": "finney",
                            "subnet": subnet,
                        }
                        for i, (u, kind, subnet) in enumerate(endpoints)
                    ]
                },
            }
        )
        stack.start_sidecar()
        stack.start_proxy()

        # real traffic: HTTP calls (some fail over from the dead endpoint) and a WebSocket
        for i in range(30):
            r = await post(stack.rpc_url(), call("system_health", id_=i))
            assert r.status == 200
        ws_url = stack.rpc_url().replace("http://", "ws://")
        async with aiohttp.ClientSession() as s, s.ws_connect(ws_url) as ws:
            await ws.send_str(json.dumps(call("chain_getHeader", id_="ws")))
            assert json.loads((await ws.receive(timeout=15)).data)["id"] == "ws"
        side = stack.sidecar_url
        dead_id = endpoint_id(endpoints[2][0])
        await _wait("the usage records", lambda: http_json(f"{side}/api/v1/usage")["requests"] > 0)
        await _wait(
            "an incident for the dead endpoint",
            lambda: dead_id in json.dumps(http_json(f"{side}/api/v1/incidents")),
        )

        pages: dict[str, str] = {}
        starts = [
            "/",
            "/?network=finney",
            "/?network=test",  # served by no endpoint here: an empty page or an error page
            "/?network=nope",  # the error page
            "/?page=0",
            "/?page=2",
            "/?page=999",
            "/no-such-page",
            # and the public JSON the page is made of
            "/api/v1/usage",
            "/api/v1/incidents",
            "/api/v1/incidents/timeline",
            "/api/v1/registry/totals",
            "/api/v1/pools/rpc",
            "/api/v1/pools/endpoints",
            "/api/v1/endpoints/root",
            "/api/v1/endpoints/callable",
            "/api/v1/heatmap",
        ]
        async with aiohttp.ClientSession() as session:
            for base in (stack.proxy_url, side):
                pages.update(await _crawl(session, base, starts))
    finally:
        stack.stop()

    dashboard = pages[f"{stack.proxy_url}/"]
    assert dead_id in dashboard  # the incident is on the page
    assert "***" in dashboard  # URLs are shown, redacted
    served = {endpoint_id(u) for u, kind, _ in endpoints[:2]}
    assert any(f'title="{i}"' in dashboard for i in served)  # the usage table has rows
    followed = [u for u in pages if "/api/v1/endpoints/endpoint-srf-" in u]
    assert len(followed) >= 4, sorted(pages)  # the endpoint pages were reached from the page
    assert any(u.endswith("/metrics") for u in pages)
    logs = [p.output() for p in stack.procs]
    for url, body in [*pages.items(), *(("log", text) for text in logs)]:
        for secret in SECRETS:
            assert secret not in body, f"{secret} on {url}"
            assert secret.lower() not in body.lower(), f"{secret} (any case) on {url}"
