"""The Metagraphed paths of a running sidecar (a real port), read by the real
``metagraphed`` client from PyPI the way its README shows: typed ``endpoints()``
and ``providers()``, ``fetch``, ``fetch_all``, ``paginate`` and
``MetagraphedError``; every answer checked against chainproxy's OpenAPI
document, and the headers a client relies on (ETag/304, CORS, errors)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from common.config import Config, parse_config
from sidecar.probing.results import ProbeResult
from sidecar.server.app import create_app
from sidecar.server.app_keys import CLOCK_KEY, PROBER_KEY
from tests.fakes import FakeClock
from tests.sidecar.registry.test_api import check_answer
from tests.sidecar.usage.stats.helpers import wire_rollup

metagraphed = pytest.importorskip("metagraphed", reason="pip install metagraphed==0.4.1")
SECRET = "SECRET123"


def _config(tmp: Path) -> Config:
    def node(port: int, provider: str, **kw: Any) -> dict[str, Any]:
        return {"url": f"http://127.0.0.1:{port}", "provider": provider, "kind": "node-rpc",
                "network": "finney", **kw}  # fmt: skip

    return parse_config(
        {
            "data_dir": str(tmp),
            "proxy": {"networks": ["finney"]},
            "probe": {"fail_threshold": 2, "recover_threshold": 2},
            "registry": {
                "endpoints": [
                    node(1, "opentensor"),
                    {
                        **node(2, "onfinality", archive=True),
                        "url": f"http://127.0.0.1:2/?apikey={SECRET}",
                    },
                    node(3, "dwellir"),
                    {
                        "url": "wss://ws.example:443",
                        "provider": "onfinality",
                        "kind": "node-wss",
                        "network": "finney",
                    },
                    {
                        "url": "https://data.example/snap",
                        "provider": "Data_Co",
                        "subnet": 12,
                        "kind": "data-artifact",
                        "network": "finney",
                    },
                ]
            },
        },
        env={},
    )


async def _running(aiohttp_server: Any, tmp: Path) -> tuple[Any, web.Application, Config, str]:
    """A sidecar with: three live nodes (one lagging), one failing for 12 minutes
    (an incident, Down), an artifact never probed, and a few minutes of usage."""
    clock = FakeClock()
    config = _config(tmp)
    app = create_app(config, probing=False, clock=clock)
    server = await aiohttp_server(app)
    a, b, c, wss, _art = config.endpoints
    for e, best, lat in ((a, 100, 40), (b, 99, 90), (wss, 100, 60), (c, 100, 30)):
        app[PROBER_KEY].observe(e, ProbeResult(e.id, clock.t, "full", "live", lat, best, 98, True))
    for _ in range(2):
        clock.advance(30)
        app[PROBER_KEY].observe(c, ProbeResult(c.id, clock.t, "full", "dead"))
    clock.advance(720)
    minute = int(clock.t // 60) - 5
    rollups = [
        wire_rollup(minute, [20, 30, 40], endpoint=a.id, errors=1),
        wire_rollup(minute + 1, [50, 60], endpoint=b.id, failovers=1),
        wire_rollup(minute + 2, [1, 1, 1, 1], endpoint=None, cache_hits=4),
    ]
    batch = {"batch_id": "ab" * 16, "sent_at": clock.t, "rollups": rollups}
    async with aiohttp.ClientSession() as s:
        r = await s.post(server.make_url("/api/v1/internal/usage"), json=batch)
        assert r.status == 200, await r.text()
    return server, app, config, str(server.make_url("")).rstrip("/")


def _read_everything(base: str) -> dict[str, Any]:
    """What a Metagraphed user does, with the client from PyPI (blocking: in a thread)."""
    from metagraphed import MetagraphedClient, MetagraphedError

    client = MetagraphedClient(base_url=base)
    out: dict[str, Any] = {
        "endpoints": client.endpoints(),
        "providers": client.providers(),
        "all": client.fetch_all("/api/v1/endpoints"),
        "pages": list(client.paginate("/api/v1/endpoints", query={"limit": 2})),
        "nodes": client.fetch_all("/api/v1/rpc/endpoints", query={"status": "ok"}),
        "pools": client.fetch("/api/v1/rpc/pools")["data"]["pools"],
        "endpoint_pools": client.fetch_all("/api/v1/endpoint-pools", query={"kind": "archive"}),
        "incidents": client.fetch("/api/v1/endpoint-incidents")["data"],
        "usage": client.fetch("/api/v1/rpc/usage", query={"window": "7d"})["data"],
        "health": client.fetch("/api/v1/health")["data"],
        "provider": client.fetch("/api/v1/providers/{slug}", path_params={"slug": "onfinality"}),
        "provider_endpoints": client.fetch_all(
            "/api/v1/providers/{slug}/endpoints", path_params={"slug": "onfinality"}
        ),
        # The path chainproxy's own API keeps: the base path reaches Metagraphed's shape.
        "downtime": MetagraphedClient(base_url=base + "/metagraphed").fetch("/api/v1/incidents"),
        "errors": {},
    }
    bad = {
        "status": ("/api/v1/endpoints", {"status": "sideways"}),
        "limit": ("/api/v1/endpoints", {"limit": 0}),
        "unknown": ("/api/v1/rpc/pools", {"colour": "red"}),
        "window": ("/api/v1/rpc/usage", {"window": "30d"}),
        "slug": ("/api/v1/providers/nobody", None),
    }
    for name, (path, query) in bad.items():
        try:
            client.fetch(path, query=query)
        except MetagraphedError as e:
            out["errors"][name] = (e.status, str(e))
    return out


async def test_the_pypi_client_reads_every_path(aiohttp_server: Any, tmp_path: Path) -> None:
    _server, _app, config, base = await _running(aiohttp_server, tmp_path)
    got = await asyncio.to_thread(_read_everything, base)
    a, b, c, wss, art = config.endpoints
    ids = {e.id for e in config.endpoints}

    endpoints = {e.surface_id: e for e in got["endpoints"]}  # typed models
    assert set(endpoints) == ids
    assert endpoints[a.id].kind == "subtensor-rpc" and endpoints[wss.id].kind == "subtensor-wss"
    assert endpoints[art.id].kind == "data-artifact" and endpoints[art.id].netuid == 12
    assert endpoints[a.id].classification == "live" and endpoints[c.id].classification == "dead"
    assert endpoints[a.id].monitoring_status == "monitored"
    assert endpoints[c.id].raw["status"] == "failed" and endpoints[a.id].raw["status"] == "ok"
    assert endpoints[art.id].raw["status"] == "unknown"
    assert endpoints[art.id].raw["health_source"] == "missing-probe"
    assert SECRET not in endpoints[b.id].url and "127.0.0.1:2" in endpoints[b.id].url
    assert (
        endpoints[b.id].raw["auth_required"] is True
        and endpoints[a.id].raw["auth_required"] is False
    )
    assert endpoints[a.id].raw["operator"] is None and endpoints[a.id].raw["public_safe"] is None
    assert endpoints[b.id].raw["latest_block"] == 99 and endpoints[b.id].raw["archive_support"]

    providers = {p.name: p for p in got["providers"]}
    assert set(providers) == {"opentensor", "onfinality", "dwellir", "Data_Co"}
    assert (
        providers["onfinality"].slug == "onfinality" and providers["onfinality"].surface_count == 2
    )
    assert providers["Data_Co"].raw["id"] == "data-co" and providers["Data_Co"].raw["netuids"] == [
        12
    ]
    assert (
        providers["opentensor"].authority is None
    )  # Metagraphed's curation: not chainproxy's to say

    # fetch_all and paginate(limit=2): every row once, in the pages' order.
    assert [r["id"] for r in got["all"]] == [
        r["id"] for p in got["pages"] for r in p["data"]["endpoints"]
    ]
    assert len(got["all"]) == 5 and len({r["id"] for r in got["all"]}) == 5
    assert [len(p["data"]["endpoints"]) for p in got["pages"]] == [2, 2, 1]
    last = got["pages"][-1]["meta"]["pagination"]
    assert last == {"collection": "endpoints", "total": 5, "returned": 1, "limit": 2, "cursor": 4,
                    "next_cursor": None, "sort": None, "order": "asc"}  # fmt: skip

    assert {r["id"] for r in got["nodes"]} == {a.id, b.id, wss.id}  # status=ok
    pools = {p["id"]: p for p in got["pools"]}
    assert set(pools) == {"finney-rpc", "finney-wss", "finney-archive"}
    assert pools["finney-rpc"]["kind"] == "subtensor-rpc"
    assert (pools["finney-rpc"]["endpoint_count"], pools["finney-rpc"]["eligible_count"]) == (3, 2)
    assert pools["finney-rpc"]["best_endpoint_id"] == a.id  # the fastest healthy member
    assert [m["id"] for m in pools["finney-rpc"]["endpoints"]][-1] == c.id  # ineligible last
    assert [p["id"] for p in got["endpoint_pools"]] == ["finney-archive"]

    inc = got["incidents"]["incidents"]
    assert len(inc) == 1 and inc[0]["endpoint_id"] == c.id and inc[0]["state"] == "active"
    assert inc[0]["severity"] == "critical" and inc[0]["reason"] == "dead"  # failing > 10 min
    assert got["incidents"]["summary"]["active_count"] == 1

    usage = got["usage"]["summary"]
    assert (usage["total_requests"], usage["error_requests"], usage["cache_hits"]) == (9, 1, 4)
    assert usage["failover_requests"] == 1 and usage["cache_hit_rate"] == round(4 / 9, 4)
    assert usage["latency_ms"]["avg"] == round((90 + 110 + 4) / 9)
    assert [e["endpoint_id"] for e in got["usage"]["endpoints"]] == [a.id, b.id]
    assert got["usage"]["networks"] == [
        {"network": "finney", "requests": 9, "ok_requests": 8, "error_rate": round(1 / 9, 4)}
    ]
    assert sum(x["requests"] for x in got["usage"]["buckets"]) == 9

    health = got["health"]
    assert health["global"]["status_counts"] == {"ok": 3, "degraded": 0, "failed": 1, "unknown": 1}
    assert {s["netuid"]: s["status"] for s in health["subnets"]} == {0: "degraded", 12: "unknown"}

    assert got["provider"]["data"]["provider"]["endpoint_count"] == 2
    assert {r["id"] for r in got["provider_endpoints"]} == {b.id, wss.id}
    surfaces = got["downtime"]["data"]["surfaces"]
    assert [s["surface_id"] for s in surfaces] == [c.id] and surfaces[0]["downtime_ms"] > 600_000

    errors = got["errors"]
    for name in ("status", "limit", "unknown", "window"):
        status, text = errors[name]
        assert status == 400 and "invalid_query" in text, (name, text)
    assert errors["slug"][0] == 404 and "not_found" in errors["slug"][1]
    assert SECRET not in json.dumps([e.raw for e in got["endpoints"]])


async def test_answers_are_documented_and_carry_the_headers(
    aiohttp_server: Any, aiohttp_client: Any, tmp_path: Path
) -> None:
    server, app, _config, _base = await _running(aiohttp_server, tmp_path)
    clock = app[CLOCK_KEY]
    assert isinstance(clock, FakeClock)
    client = await aiohttp_client(server)
    for path in (
        "/api/v1/health",
        "/api/v1/endpoints",
        "/api/v1/rpc/endpoints",
        "/api/v1/rpc/pools",
        "/api/v1/endpoint-pools",
        "/api/v1/endpoint-incidents",
        "/api/v1/rpc/usage",
        "/api/v1/providers",
        "/metagraphed/api/v1/incidents",
        "/metagraphed/api/v1/endpoints",
    ):
        r = await client.get(path)
        assert r.status == 200, path
        check_answer(path, 200, await r.json())
        assert r.headers["Access-Control-Allow-Origin"] == "*"
        assert r.headers["X-Metagraph-Contract-Version"]
        etag = r.headers["ETag"]
        if path != "/metagraphed/api/v1/incidents":  # (its ongoing downtime grows with time)
            clock.advance(1)  # a second later: the document's time moved, not what it says
        again = await client.get(path, headers={"If-None-Match": etag})
        assert again.status == 304 and await again.read() == b"", path
    for path in ("/api/v1/providers/{slug}", "/api/v1/providers/{slug}/endpoints"):
        r = await client.get(path.replace("{slug}", "dwellir"))
        check_answer(path, 200, await r.json())

    r = await client.get("/api/v1/endpoints?limit=2&cursor=2")
    assert 'rel="next"' in r.headers["Link"] and 'rel="prev"' in r.headers["Link"]
    r = await client.get("/api/v1/endpoints?kind=nope")
    assert r.status == 400 and r.headers["X-Metagraph-Error-Code"] == "invalid_query"
    body = await r.json()
    check_answer("/api/v1/endpoints", 400, body)
    assert body["ok"] is False and body["meta"]["parameter"] == "kind"

    r = await client.options(
        "/api/v1/endpoints",
        headers={"Origin": "https://x.example", "Access-Control-Request-Method": "GET",
                 "Access-Control-Request-Headers": "if-none-match"},
    )  # fmt: skip
    assert r.status == 204 and "GET" in r.headers["Access-Control-Allow-Methods"]
    assert r.headers["Access-Control-Allow-Headers"] == "if-none-match"
    r = await client.post("/api/v1/endpoints")
    assert r.status == 405 and (await r.json())["error"]["code"] == "method_not_allowed"
    r = await client.get("/metagraphed/api/v1/nothing")
    assert r.status == 404 and (await r.json())["error"]["code"] == "not_found"
    # chainproxy's own paths keep chainproxy's shapes (docs/OPERATIONS.md#dashboard-and-json-api).
    own = await (await client.get("/api/v1/incidents")).json()
    assert set(own) == {"hosts", "incidents"}
    assert (await (await client.get("/nope")).json())["error"]["code"] == 404
