"""The registry's public JSON API in-process (aiohttp test client): every path, every
bad input, read-only methods, secrets, incidents from probes, persistence across a
restart, and every answer validated against the OpenAPI document."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate as validate_spec

from common.config import Config, Endpoint, parse_config
from sidecar.incidents.store import IncidentStore
from sidecar.jsonfmt import iso
from sidecar.probing.results import ProbeResult
from sidecar.server.app import create_app
from sidecar.server.app_keys import PROBER_KEY
from sidecar.server.openapi.document import openapi_document
from sidecar.server.openapi.metagraphed import paths as metagraphed_paths
from tests.fakes import FakeClock
from tests.sidecar.usage.stats.helpers import wire_rollup

T0 = 1_800_000_000.0
SECRET = "SECRET123"

PUBLIC_GETS = [
    "/healthz",
    "/api/v1/usage",
    "/api/v1/registry/totals",
    "/api/v1/pools/rpc",
    "/api/v1/pools/endpoints",
    "/api/v1/endpoints/root",
    "/api/v1/endpoints/callable",
    "/api/v1/heatmap",
    "/api/v1/incidents",
    "/api/v1/incidents/timeline",
    "/api/v1/openapi.json",
    "/api/v1/networks",
]


def _config(tmp: Path, n_extra: int = 0, **probe: Any) -> Config:
    endpoints = [
        {"url": "http://127.0.0.1:1", "provider": "a", "kind": "node-rpc", "network": "finney"},
        {
            "url": f"http://127.0.0.1:2/?apikey={SECRET}",
            "provider": "b",
            "kind": "node-rpc",
            "network": "finney",
            "archive": True,
        },
        {
            "url": f"wss://ws.example:443/?apikey={SECRET}",
            "provider": "b",
            "kind": "node-wss",
            "network": "finney",
        },
        {
            "url": "https://data.example/snap",
            "provider": "c",
            "kind": "data-artifact",
            "network": "finney",
            "subnet": 12,
        },
    ]
    endpoints += [
        {"url": f"http://10.0.0.{i}:9944", "provider": "x", "kind": "node-rpc", "network": "test"}
        for i in range(n_extra)
    ]
    return parse_config(
        {
            "data_dir": str(tmp),
            "probe": {"fail_threshold": 2, "recover_threshold": 2, **probe},
            "registry": {"endpoints": endpoints},
        },
        env={},
    )


def _factory(outcomes: dict[str, str] | None = None, clock: FakeClock | None = None) -> Any:
    """Provider -> classification for scheduled probes (default live)."""

    def factory(_session: Any, _config: Config) -> Any:
        async def probe(e: Endpoint, kind: str) -> ProbeResult:
            c = (outcomes or {}).get(e.provider, "live")
            at = clock() if clock else T0
            if c != "live":
                return ProbeResult(e.id, at, kind, c)  # type: ignore[arg-type]
            return ProbeResult(e.id, at, kind, "live", 40, 100, 98, True)  # type: ignore[arg-type]

        return probe

    return factory


def observe(
    app: web.Application, clock: FakeClock, e: Endpoint, outcome: str, lat: int = 40
) -> None:
    clock.t += 30
    ok = outcome == "live"
    result = ProbeResult(
        e.id, clock.t, "full", outcome, lat if ok else None, 100 if ok else None, None
    )
    app[PROBER_KEY].observe(e, result)


async def _client(
    aiohttp_client: Any, config: Config, clock: FakeClock
) -> tuple[Any, web.Application]:
    app = create_app(config, probing=False, probe_factory=_factory(), clock=clock)
    return await aiohttp_client(app), app


# --- the OpenAPI document -----------------------------------------------------------------------


def _strict(node: Any) -> Any:
    """Every object schema with listed properties refuses unlisted ones: the document
    must describe every field the API sends."""
    if isinstance(node, dict):
        out = {k: _strict(v) for k, v in node.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


DOC = openapi_document()


def check_answer(path_template: str, status: int, body: Any) -> None:
    op = DOC["paths"][path_template]["get"]
    schema = op["responses"][str(status)]["content"]["application/json"]["schema"]
    root = {**_strict(copy.deepcopy(schema)), "components": _strict(DOC["components"])}
    Draft202012Validator(root, format_checker=Draft202012Validator.FORMAT_CHECKER).validate(body)


def test_openapi_document_is_valid() -> None:
    validate_spec(openapi_document())
    assert openapi_document() == openapi_document()


def test_openapi_documents_every_public_route(tmp_path: Path) -> None:
    app = create_app(_config(tmp_path), probing=False)
    routes = {
        r.resource.canonical
        for r in app.router.routes()
        if r.method == "GET" and r.resource is not None
    }
    public = {p for p in routes if not p.startswith("/api/v1/internal/")}
    assert public == set(DOC["paths"])
    assert set(PUBLIC_GETS) | {
        "/api/v1/endpoints/{id}",
        "/api/v1/networks/{network}",
        "/metrics",
        "/",
    } == set(DOC["paths"]) - set(metagraphed_paths())


# --- every path --------------------------------------------------------------------------------


async def test_every_public_path_answers_documented_json(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    clock = FakeClock()
    config = _config(tmp_path)
    client, app = await _client(aiohttp_client, config, clock)
    # Before any probe, then with OK, Degraded (an incident) and resolved incidents.
    for stage in range(3):
        if stage == 1:
            for e in config.endpoints:
                observe(app, clock, e, "live")
            for _ in range(2):
                observe(app, clock, config.endpoints[0], "dead")
        if stage == 2:
            for _ in range(2):
                observe(app, clock, config.endpoints[0], "live")
            for _ in range(2):
                observe(app, clock, config.endpoints[2], "timeout")
            clock.t += 3600
        for path in PUBLIC_GETS:
            r = await client.get(path)
            assert r.status == 200, path
            assert r.content_type == "application/json"
            text = await r.text()
            assert SECRET not in text, path
            check_answer(path, 200, await r.json())
        for e in config.endpoints:
            r = await client.get(f"/api/v1/endpoints/{e.id}")
            assert r.status == 200
            check_answer("/api/v1/endpoints/{id}", 200, await r.json())
            assert SECRET not in await r.text()


async def test_bad_inputs_are_documented_json_errors(aiohttp_client: Any, tmp_path: Path) -> None:
    client, _ = await _client(aiohttp_client, _config(tmp_path), FakeClock())
    cases = [
        ("/api/v1/endpoints/callable?page=0", 400),
        ("/api/v1/endpoints/callable?page=-1", 400),
        ("/api/v1/endpoints/callable?page=abc", 400),
        ("/api/v1/endpoints/callable?page=1.5", 400),
        ("/api/v1/endpoints/callable?page=", 400),
        ("/api/v1/endpoints/callable?page=1e3", 400),
        ("/api/v1/endpoints/callable?page=%00", 400),
        ("/api/v1/endpoints/callable?page=%ff", 400),
        ("/api/v1/endpoints/callable?page=%EF%BC%91", 400),  # a fullwidth digit one
        ("/api/v1/endpoints/callable?page=1&page=1", 400),
        ("/api/v1/endpoints/callable?page=2", 404),
        ("/api/v1/endpoints/callable?page=" + "9" * 5000, 404),
        ("/api/v1/endpoints/endpoint-srf-0000000000000000", 404),
        ("/api/v1/endpoints/nonsense", 404),
        ("/api/v1/usage?network=mars", 404),
        ("/api/v1/usage?network=%ff", 404),
    ]
    for url, status in cases:
        r = await client.get(url)
        assert r.status == status, url
        body = await r.json()
        assert body["error"]["code"] == status and body["error"]["message"]
        template = url.split("?")[0]
        if template.startswith("/api/v1/endpoints/") and template.count("/") == 4:
            if not template.endswith("callable"):
                template = "/api/v1/endpoints/{id}"
        check_answer(template, status, body)
    # Unknown query keys are ignored (cache busters), the answer is unchanged.
    r = await client.get("/api/v1/endpoints/callable?page=1&_=123")
    assert r.status == 200 and (await r.json())["page"] == 1


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH"])
async def test_public_paths_are_read_only(aiohttp_client: Any, tmp_path: Path, method: str) -> None:
    config = _config(tmp_path)
    client, _ = await _client(aiohttp_client, config, FakeClock())
    for path in [*PUBLIC_GETS, "/metrics", f"/api/v1/endpoints/{config.endpoints[0].id}"]:
        r = await client.request(method, path, data=b"{}")
        assert r.status == 405, (method, path)
        assert r.content_type == "application/json"
        assert (await r.json())["error"]["code"] == 405
        assert "GET" in r.headers["Allow"]


async def test_root_and_callable_are_not_taken_for_endpoint_ids(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    client, _ = await _client(aiohttp_client, _config(tmp_path), FakeClock())
    root = await (await client.get("/api/v1/endpoints/root")).json()
    assert set(root) == {"rows", "summary"} and root["summary"]["total"] == 3
    page = await (await client.get("/api/v1/endpoints/callable")).json()
    assert page["page"] == 1 and page["total"] == 4


async def test_callable_pages_over_http(aiohttp_client: Any, tmp_path: Path) -> None:
    config = _config(tmp_path, n_extra=56)  # 60 endpoints
    client, _ = await _client(aiohttp_client, config, FakeClock())
    p2 = await (await client.get("/api/v1/endpoints/callable?page=2")).json()
    assert (p2["total"], p2["pages"], p2["page_size"], len(p2["rows"])) == (60, 3, 25, 25)
    ordered = sorted(enumerate(config.endpoints), key=lambda ie: (ie[1].subnet, ie[0]))
    assert [r["id"] for r in p2["rows"]] == [e.id for _, e in ordered][25:50]
    p3 = await (await client.get("/api/v1/endpoints/callable?page=3")).json()
    assert len(p3["rows"]) == 10 and p3["rows"][-1]["subnet"] == "012"
    assert (await client.get("/api/v1/endpoints/callable?page=4")).status == 404
    wss = next(r for r in p2["rows"] + (await (await client.get(
        "/api/v1/endpoints/callable")).json())["rows"] if r["kind"] == "node-wss")  # fmt: skip
    assert wss["url"] == "wss://ws.example:443?apikey=***"


async def test_empty_registry(aiohttp_client: Any, tmp_path: Path) -> None:
    config = parse_config({"data_dir": str(tmp_path)}, env={})
    client, _ = await _client(aiohttp_client, config, FakeClock())
    page = await (await client.get("/api/v1/endpoints/callable?page=1")).json()
    assert (page["total"], page["pages"], page["rows"]) == (0, 1, [])
    assert (await client.get("/api/v1/endpoints/callable?page=2")).status == 404
    assert await (await client.get("/api/v1/pools/rpc")).json() == []
    totals = await (await client.get("/api/v1/registry/totals")).json()
    assert totals["endpoints_tracked"] == 0 and totals["healthy_pct"] == 0
    assert await (await client.get("/api/v1/heatmap")).json() == {
        "buckets": [150, 400, 1000],
        "rows": [],
    }
    timeline = await (await client.get("/api/v1/incidents/timeline")).json()
    assert timeline == {"endpoints": [], "hosts": []}


# --- incidents ---------------------------------------------------------------------------------


async def test_incident_opens_and_resolves_with_probes(aiohttp_client: Any, tmp_path: Path) -> None:
    clock = FakeClock()
    config = _config(tmp_path)
    a = config.endpoints[0]
    client, app = await _client(aiohttp_client, config, clock)
    observe(app, clock, a, "live")
    observe(app, clock, a, "dead")
    assert (await (await client.get("/api/v1/incidents")).json())["incidents"] == []
    observe(app, clock, a, "dead")
    started = clock.t
    clock.t += 7500 - 60  # recovery takes two more probes, 30 s apart: 2h 05m in all
    doc = await (await client.get("/api/v1/incidents")).json()
    assert doc["hosts"] == 1
    [inc] = doc["incidents"]
    assert inc["endpoint"] == a.id and inc["state"] == "ongoing" and inc["message"] == "dead"
    assert (inc["severity"], inc["duration"], inc["ended"]) == ("Down", "2h 04m", None)
    timeline = await (await client.get("/api/v1/incidents/timeline")).json()
    assert timeline["endpoints"][0] == {"endpoint": a.id, "ongoing": 1, "total": 1}
    host = next(h for h in timeline["hosts"] if h["host"] == "127.0.0.1")
    assert (host["ongoing"], host["total"]) == (1, 1)
    assert host["links"] == sorted([a.id, config.endpoints[1].id])
    observe(app, clock, a, "live")
    observe(app, clock, a, "live")
    [inc] = (await (await client.get("/api/v1/incidents")).json())["incidents"]
    assert inc["state"] == "resolved" and inc["duration"] == "2h 05m"
    assert clock.t - started == 7500
    detail = await (await client.get(f"/api/v1/endpoints/{a.id}")).json()
    assert detail["incidents"] == [inc]
    other = await (await client.get(f"/api/v1/endpoints/{config.endpoints[1].id}")).json()
    assert other["incidents"] == []


async def test_incidents_from_the_running_prober(aiohttp_client: Any, tmp_path: Path) -> None:
    """The hook is wired: the scheduler's own probes open an incident."""
    config = _config(tmp_path, interval_s=0.05, head_interval_s=0.05)
    app = create_app(config, probe_factory=_factory({"a": "http-503"}, FakeClock()))
    client = await aiohttp_client(app)
    for _ in range(200):
        doc = await (await client.get("/api/v1/incidents")).json()
        if doc["incidents"]:
            break
        await asyncio.sleep(0.02)
    [inc] = doc["incidents"]
    assert (inc["endpoint"], inc["message"], inc["state"]) == (
        config.endpoints[0].id,
        "http-503",
        "ongoing",
    )


async def test_incidents_survive_a_restart(aiohttp_client: Any, tmp_path: Path) -> None:
    clock = FakeClock()
    config = _config(tmp_path)
    a, b = config.endpoints[0], config.endpoints[1]
    client, app = await _client(aiohttp_client, config, clock)
    for e in (a, b):
        observe(app, clock, e, "live")
    for outcome in ("dead", "dead", "live", "live", "timeout", "timeout"):
        observe(app, clock, a, outcome)  # one resolved, one ongoing
    before = await (await client.get("/api/v1/incidents")).json()
    assert [i["state"] for i in before["incidents"]] == ["ongoing", "resolved"]
    await client.close()  # shutdown flushes health and incidents

    client2, app2 = await _client(aiohttp_client, config, clock)
    after = await (await client2.get("/api/v1/incidents")).json()
    assert after == before  # the open one is still open: its restored health is Degraded
    detail = await (await client2.get(f"/api/v1/endpoints/{a.id}")).json()
    assert detail["status"] == "Degraded" and len(detail["incidents"]) == 2
    observe(app2, clock, a, "live")
    observe(app2, clock, a, "live")  # recovery after the restart closes it
    doc = await (await client2.get("/api/v1/incidents")).json()
    assert [i["state"] for i in doc["incidents"]] == ["resolved", "resolved"]
    await client2.close()

    client3, _ = await _client(aiohttp_client, config, clock)
    assert await (await client3.get("/api/v1/incidents")).json() == doc


async def test_restart_closes_an_incident_whose_health_recovered(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    clock = FakeClock()
    config = _config(tmp_path)
    a = config.endpoints[0]
    client, app = await _client(aiohttp_client, config, clock)
    for outcome in ("live", "dead", "dead", "live", "live"):
        observe(app, clock, a, outcome)
    recovered_at = clock.t
    await client.close()
    # The recovery reached the health table but not the incident table (a crash).
    store = IncidentStore(tmp_path / "sidecar.sqlite3")
    [inc] = store.load()
    store.save([dataclasses.replace(inc, ended=None)])
    store.close()

    clock.t += 600
    client2, _ = await _client(aiohttp_client, config, clock)
    [row] = (await (await client2.get("/api/v1/incidents")).json())["incidents"]
    assert row["state"] == "resolved"
    assert row["ended"] == iso(recovered_at)  # its last good probe, not the restart


async def test_usage_with_traffic_matches_its_schema(aiohttp_client: Any, tmp_path: Path) -> None:
    clock = FakeClock()
    config = _config(tmp_path)
    client, _ = await _client(aiohttp_client, config, clock)
    minute = int(clock.t // 60)
    a, b = config.endpoints[0].id, config.endpoints[1].id
    rollups = [
        wire_rollup(minute, [100] * 4, endpoint=a, errors=1, failovers=1),
        wire_rollup(minute, [30] * 2, endpoint=b),
        wire_rollup(minute, [1] * 3, endpoint=None, cache_hits=3),
    ]
    r = await client.post(
        "/api/v1/internal/usage",
        json={"batch_id": uuid.uuid4().hex, "sent_at": clock.t, "rollups": rollups},
    )
    assert r.status == 200, await r.text()
    for query in ("", "?network=finney", "?network=test"):
        doc = await (await client.get("/api/v1/usage" + query)).json()
        check_answer("/api/v1/usage", 200, doc)
    assert doc["by_network"]["finney"] == 9 and SECRET not in json.dumps(doc)
