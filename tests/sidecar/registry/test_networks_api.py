"""The per-network documents (``/api/v1/networks``, ``/api/v1/networks/{network}``)
and the runtime metrics, in-process: heights, the runtime the best blocks run,
the last upgrade (kept across a restart), an unknown network, and every answer
validated against the OpenAPI document."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from common.config import Config, Endpoint, parse_config
from sidecar.probing.chain_runtime import ChainRuntimeBook, RuntimeVersion
from sidecar.probing.results import LIVE, ProbeResult
from sidecar.registry.networks import runtime_lines, runtime_text
from sidecar.server.app import create_app
from sidecar.server.app_keys import PROBER_KEY
from tests.fakes import FakeClock
from tests.sidecar.registry.test_api import check_answer

T0 = 1_800_000_000.0


def make_config(tmp: Path) -> Config:
    endpoints = [
        {"url": f"http://127.0.0.1:{i}", "provider": p, "kind": "node-rpc", "network": "finney"}
        for i, p in ((1, "a"), (2, "b"))
    ]
    endpoints.append(
        {"url": "http://10.0.0.1:9944", "provider": "t", "kind": "node-rpc", "network": "test"}
    )
    return parse_config(
        {
            "data_dir": str(tmp),
            "proxy": {"networks": ["finney"]},
            "registry": {"endpoints": endpoints},
        },
        env={},
    )


def head(app: web.Application, clock: FakeClock, e: Endpoint, best: int, spec: int) -> None:
    clock.t += 6
    result = ProbeResult(
        e.id, clock.t, "head", LIVE, 20, best, best - 2, None, "", "node-subtensor", spec
    )
    app[PROBER_KEY].observe(e, result)


async def get(client: Any, path: str, template: str | None = None, status: int = 200) -> Any:
    r = await client.get(path)
    assert r.status == status, (path, await r.text())
    body = await r.json()
    check_answer(template or path, status, body)
    return body


async def scrape(client: Any) -> dict[str, Any]:
    text = await (await client.get("/metrics")).text()
    return {f.name: f for f in text_string_to_metric_families(text)}


async def test_networks_show_the_runtime_and_its_last_upgrade(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    clock, config = FakeClock(T0), make_config(tmp_path)
    app = create_app(config, probing=False, clock=clock)
    client = await aiohttp_client(app)
    a, b, _ = config.endpoints

    doc = await get(client, "/api/v1/networks")
    assert [n["network"] for n in doc["networks"]] == ["finney", "test"]
    assert doc["networks"][0] == {
        "network": "finney",
        "served": True,
        "tip": None,
        "finalized": None,
        "runtime": None,
        "last_upgrade": None,
    }
    assert doc["networks"][1]["served"] is False
    families = await scrape(client)
    assert [
        (s.labels, s.value)
        for s in families["chainproxy_runtime_upgrades"].samples
        if s.name.endswith("_total")
    ] == [
        ({"network": "finney"}, 0.0),
        ({"network": "test"}, 0.0),
    ]

    head(app, clock, a, 100, 300)
    head(app, clock, b, 100, 300)
    finney = await get(client, "/api/v1/networks/finney", "/api/v1/networks/{network}")
    assert (finney["tip"], finney["finalized"]) == (100, 98)
    assert finney["runtime"] == {
        "spec_name": "node-subtensor",
        "spec_version": 300,
        "since_block": None,
        "seen_block": 100,
        "seen_at": "2027-01-15T08:00:06Z",  # the first reading at that block
    }
    assert finney["last_upgrade"] is None

    head(app, clock, a, 101, 301)
    head(app, clock, b, 101, 301)
    finney = await get(client, "/api/v1/networks/finney", "/api/v1/networks/{network}")
    assert finney["runtime"]["spec_version"] == 301 and finney["runtime"]["since_block"] == 101
    assert finney["last_upgrade"] == {
        "from": {"spec_name": "node-subtensor", "spec_version": 300},
        "to": {"spec_name": "node-subtensor", "spec_version": 301},
        "block": 101,
        "after_block": 100,
        "at": "2027-01-15T08:00:18Z",
    }
    families = await scrape(client)
    upgrades = {
        s.labels["network"]: s.value
        for s in families["chainproxy_runtime_upgrades"].samples
        if s.name.endswith("_total")
    }
    assert upgrades == {"finney": 1.0, "test": 0.0}
    spec = families["chainproxy_runtime_spec_version"].samples
    assert [(s.labels, s.value) for s in spec] == [({"network": "finney"}, 301.0)]
    await get(client, "/api/v1/networks", "/api/v1/networks")
    page = await (await client.get("/")).text()  # and one line on the dashboard
    assert "finney: runtime node-subtensor 301 · upgraded from 300 at block 101, 2027-01-15" in page
    assert "test: runtime" not in page  # not read yet: no line

    # a restart keeps the runtime and the last upgrade (the counter starts again)
    await client.close()
    app = create_app(config, probing=False, clock=clock)
    client = await aiohttp_client(app)
    again = await get(client, "/api/v1/networks/finney", "/api/v1/networks/{network}")
    assert again["runtime"]["spec_version"] == 301
    assert again["last_upgrade"] == finney["last_upgrade"]


async def test_an_unknown_network_is_a_404(aiohttp_client: Any, tmp_path: Path) -> None:
    client = await aiohttp_client(create_app(make_config(tmp_path), probing=False))
    for name in ("mars", "%ff", "x" * 500):
        body = await get(client, f"/api/v1/networks/{name}", "/api/v1/networks/{network}", 404)
        assert body["error"]["code"] == 404 and "unknown network" in body["error"]["message"]
    r = await client.post("/api/v1/networks")
    assert r.status == 405


def test_the_dashboard_line_of_a_runtime() -> None:
    book = ChainRuntimeBook(make_config(Path("/nonexistent")))
    assert runtime_text(book.get("finney")) is None
    book.see("finney", 100, RuntimeVersion("node-subtensor", 300), T0)
    assert runtime_text(book.get("finney")) == "runtime node-subtensor 300"
    book.see("finney", 101, RuntimeVersion("node-subtensor", 301), T0 + 60)
    assert runtime_text(book.get("finney")) == (
        "runtime node-subtensor 301 · upgraded from 300 at block 101, 2027-01-15 08:01 UTC"
    )
    assert runtime_lines(book.config, book) == {"finney": runtime_text(book.get("finney"))}
    assert runtime_lines(book.config, None) == {}
