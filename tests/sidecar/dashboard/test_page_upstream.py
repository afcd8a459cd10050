"""The dashboard and the endpoint objects of the JSON API show a node's
capacity (aiohttp test client): a badge while it backs off (and none
otherwise), its configured budget and the rate the proxies learned, the same
in the API's endpoint lists and detail, and never which proxy reported it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from common.config import Config, parse_config
from sidecar.server.app import create_app
from tests.fakes import FakeClock
from tests.sidecar.metrics_batch import batch_with_metrics
from tests.sidecar.registry.test_api import check_answer

T0 = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC
USAGE = "/api/v1/internal/usage"
PROXY_ID = "edge-7.internal:4242"


def config(tmp: Path) -> Config:
    def ep(port: int, provider: str, **kw: Any) -> dict[str, Any]:
        return {"url": f"http://127.0.0.1:{port}", "provider": provider, "kind": "node-rpc",
                "network": "finney", **kw}  # fmt: skip

    endpoints = [ep(1, "alpha", max_rps=20, max_concurrency=8), ep(2, "beta"), ep(3, "gamma")]
    return parse_config({"data_dir": str(tmp), "registry": {"endpoints": endpoints}}, env={})


async def start(aiohttp_client: Any, tmp: Path) -> tuple[Any, FakeClock, Config]:
    clock, cfg = FakeClock(T0), config(tmp)
    return await aiohttp_client(create_app(cfg, probing=False, clock=clock)), clock, cfg


async def report(client: Any, gauges: dict[str, Any], sent_at: float) -> None:
    batch = batch_with_metrics({"proxy_id": PROXY_ID, "gauges": gauges}, sent_at=sent_at)
    assert (await client.post(USAGE, json=batch)).status == 200


async def page(client: Any) -> str:
    r = await client.get("/")
    assert r.status == 200
    return await r.text()


def rows(html: str, name: str) -> dict[str, str]:
    """The rows of a section's table by the provider they name."""
    body = re.search(rf'<section id="{name}">(.*?)</section>', html, re.S)
    assert body, name
    out = {}
    for row in re.findall(r"<tr>(.*?)</tr>", body.group(1), re.S):
        for provider in ("alpha", "beta", "gamma"):
            if f"<td>{provider}</td>" in row:
                out[provider] = row
    return out


async def test_a_backing_off_node_wears_a_badge_until_it_is_over(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    client, clock, cfg = await start(aiohttp_client, tmp_path)
    _alpha, beta, _gamma = (e.id for e in cfg.endpoints)
    assert "backing off" not in await page(client)  # no proxy has reported

    await report(client, {"upstream_backoff_s": {beta: 30}}, sent_at=T0 + 1)
    clock.t = T0 + 2
    html = await page(client)
    root = rows(html, "root-endpoints")
    assert '<span class="badge s-backoff"' in root["beta"]
    assert "backing off until 08:00:31 UTC" in root["beta"]
    assert "backing off" not in root["alpha"] and "backing off" not in root["gamma"]
    assert "backing off until 08:00:31 UTC" in rows(html, "callable")["beta"]
    assert PROXY_ID not in html and "edge-7" not in html  # who reported it is not public

    clock.t = T0 + 31  # over
    assert "backing off" not in await page(client)


async def test_budgets_and_learned_rates_are_shown(aiohttp_client: Any, tmp_path: Path) -> None:
    client, _clock, cfg = await start(aiohttp_client, tmp_path)
    _alpha, beta, _gamma = (e.id for e in cfg.endpoints)
    await report(client, {"upstream_learned_rps": {beta: 12}}, sent_at=T0)
    root = rows(await page(client), "root-endpoints")
    assert "≤ 20/s, ≤ 8 in flight" in root["alpha"]
    assert "learned 12/s" in root["beta"] and "≤" not in root["beta"]
    assert "≤" not in root["gamma"] and "learned" not in root["gamma"]  # unlimited, nothing learned


async def test_the_endpoint_objects_carry_the_capacity(aiohttp_client: Any, tmp_path: Path) -> None:
    client, clock, cfg = await start(aiohttp_client, tmp_path)
    alpha, beta, gamma = (e.id for e in cfg.endpoints)
    await report(
        client, {"upstream_backoff_s": {beta: 30}, "upstream_learned_rps": {beta: 12}}, sent_at=T0
    )
    clock.t = T0 + 2
    root = await (await client.get("/api/v1/endpoints/root")).json()
    check_answer("/api/v1/endpoints/root", 200, root)
    by_id = {r["id"]: r for r in root["rows"]}
    assert by_id[alpha]["budget"] == {"max_rps": 20, "max_concurrency": 8}
    assert (by_id[alpha]["backoff_until"], by_id[alpha]["learned_rps"]) == (None, None)
    assert by_id[beta]["backoff_until"] == "2027-01-15T08:00:30Z"
    assert by_id[beta]["budget"] == {"max_rps": None, "max_concurrency": None}
    assert by_id[beta]["learned_rps"] == 12
    callable_ = await (await client.get("/api/v1/endpoints/callable")).json()
    check_answer("/api/v1/endpoints/callable", 200, callable_)
    assert {r["id"]: r["backoff_until"] for r in callable_["rows"]} == {
        alpha: None, beta: "2027-01-15T08:00:30Z", gamma: None,
    }  # fmt: skip
    for eid in (alpha, beta):
        detail = await (await client.get(f"/api/v1/endpoints/{eid}")).json()
        check_answer("/api/v1/endpoints/{id}", 200, detail)
        assert {k: detail[k] for k in ("backoff_until", "budget", "learned_rps")} == {
            k: by_id[eid][k] for k in ("backoff_until", "budget", "learned_rps")
        }
    clock.t = T0 + 30
    root = await (await client.get("/api/v1/endpoints/root")).json()
    assert [r["backoff_until"] for r in root["rows"]] == [None, None, None]
