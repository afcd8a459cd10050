"""The sidecar app in-process (aiohttp test client) with a fake probe."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from common.config import Config, parse_config
from sidecar.server.app import create_app
from sidecar.server.app_keys import PROBER_KEY
from tests.sidecar.helpers import fake_factory


def _config(tmp: Path, token: str | None = None) -> Config:
    return parse_config(
        {
            "sidecar": {"token": token},
            "data_dir": str(tmp),
            "probe": {"interval_s": 0.05, "head_interval_s": 0.05, "fail_threshold": 2},
            "registry": {
                "endpoints": [
                    {
                        "url": "http://127.0.0.1:1",
                        "provider": "a",
                        "kind": "node-rpc",
                        "network": "finney",
                    },
                    {
                        "url": "http://127.0.0.1:2/?apikey=SECRET123",
                        "provider": "b",
                        "kind": "node-rpc",
                        "network": "finney",
                        "archive": True,
                    },
                    {
                        "url": "http://127.0.0.1:3",
                        "provider": "c",
                        "kind": "node-rpc",
                        "network": "finney",
                    },
                ]
            },
        },
        env={},
    )


async def test_healthz_reports_ok(aiohttp_client: Any, tmp_path: Path) -> None:
    client = await aiohttp_client(
        create_app(_config(tmp_path), probing=False, probe_factory=fake_factory({}))
    )
    r = await client.get("/healthz")
    assert r.status == 200
    body = await r.json()
    assert body["status"] == "ok" and body["endpoints"] == 3


async def test_unknown_path_and_wrong_method_are_json_errors(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    client = await aiohttp_client(
        create_app(_config(tmp_path), probing=False, probe_factory=fake_factory({}))
    )
    r = await client.get("/nope")
    assert r.status == 404 and (await r.json())["error"]["code"] == 404
    r = await client.post("/healthz")
    assert r.status == 405 and r.content_type == "application/json"
    assert "GET" in r.headers["Allow"]


async def _wait_probed(app: Any, n: int) -> None:
    prober = app[PROBER_KEY]
    for _ in range(200):
        if len(prober.health) >= n and all(h.probed for h in prober.health.values()):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("endpoints were not probed")


async def test_routing_snapshot_ranks_synced_lagging_and_dead(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    app = create_app(_config(tmp_path), probe_factory=fake_factory({"a": 100, "b": 90, "c": None}))
    client = await aiohttp_client(app)
    await _wait_probed(app, 3)
    await asyncio.sleep(0.3)  # enough failed probes for c to cross fail_threshold
    doc = await (await client.get("/api/v1/internal/routes/finney")).json()
    assert doc["network"] == "finney" and doc["tip"] == 100 and doc["finalized"] == 98
    assert doc["generated_at"].endswith("Z")
    by = {u["provider"]: u for u in doc["upstreams"]}
    assert [u["provider"] for u in doc["upstreams"]] == ["a", "b", "c"]
    assert (by["a"]["tier"], by["a"]["synced"], by["a"]["lag"]) == (0, True, 0)
    assert (by["b"]["tier"], by["b"]["synced"], by["b"]["lag"]) == (1, False, 10)
    assert by["b"]["archive"] is True
    assert (by["c"]["tier"], by["c"]["healthy"], by["c"]["classification"]) == (3, False, "dead")
    assert by["c"]["status"] == "Degraded"
    assert "SECRET123" not in str(doc)
    r = await client.get("/api/v1/internal/routes/mars")
    assert r.status == 404


async def test_internal_api_needs_the_token_when_set(aiohttp_client: Any, tmp_path: Path) -> None:
    app = create_app(
        _config(tmp_path, token="s3cret"), probing=False, probe_factory=fake_factory({})
    )
    client = await aiohttp_client(app)
    assert (await client.get("/api/v1/internal/routes/finney")).status == 401
    r = await client.get(
        "/api/v1/internal/routes/finney", headers={"Authorization": "Bearer wrong"}
    )
    assert r.status == 401
    r = await client.get(
        "/api/v1/internal/routes/finney", headers={"Authorization": "Bearer s3cret"}
    )
    assert r.status == 200
    # Public paths do not need it.
    assert (await client.get("/healthz")).status == 200


async def test_endpoint_detail_and_restart_keeps_health(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    config = _config(tmp_path)
    app = create_app(config, probe_factory=fake_factory({"a": 100, "b": 100, "c": None}))
    client = await aiohttp_client(app)
    await _wait_probed(app, 3)
    eid = config.endpoints[0].id
    d = await (await client.get(f"/api/v1/endpoints/{eid}")).json()
    assert d["id"] == eid and d["status"] == "OK" and d["heights"]["best"] == 100
    assert d["probes"] and d["probes"][0]["classification"] == "live"
    assert (await client.get("/api/v1/endpoints/endpoint-srf-0000000000000000")).status == 404
    await client.close()

    # A new process (same data_dir) starts with the statuses it had.
    app2 = create_app(config, probing=False, probe_factory=fake_factory({}))
    client2 = await aiohttp_client(app2)
    d = await (await client2.get(f"/api/v1/endpoints/{eid}")).json()
    assert d["status"] == "OK" and d["probed"] is True and d["heights"]["best"] == 100


async def test_metrics_expose_endpoint_status_heads_and_usage(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    app = create_app(_config(tmp_path), probe_factory=fake_factory({"a": 100, "b": 90, "c": None}))
    client = await aiohttp_client(app)
    await _wait_probed(app, 3)
    batch = {"batch_id": "ab" * 16, "sent_at": 1.0, "rollups": []}
    r = await client.post("/api/v1/internal/usage", json=batch)
    assert r.status == 200
    r = await client.get("/metrics")
    assert r.status == 200 and r.content_type == "text/plain"
    text = await r.text()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    ups = {s.labels["provider"]: s.value for s in families["chainproxy_endpoint_up"].samples}
    assert ups == {"a": 1.0, "b": 1.0, "c": 0.0}
    tip = families["chainproxy_chain_tip"].samples
    assert [(s.labels["network"], s.value) for s in tip] == [("finney", 100.0)]
    lag = {
        s.labels["provider"]: s.value for s in families["chainproxy_endpoint_lag_blocks"].samples
    }
    assert lag["b"] == 10.0
    assert "chainproxy_proxy_requests" in families and "chainproxy_usage_spool_batches" in families
    batches = {
        s.labels["result"]: s.value
        for s in families["chainproxy_usage_batches"].samples
        if s.name.endswith("_total")
    }
    assert batches["accepted"] == 1.0
    assert "SECRET123" not in text
    await asyncio.sleep(0.3)  # c crosses fail_threshold: an incident opens
    families = {
        f.name: f
        for f in text_string_to_metric_families(await (await client.get("/metrics")).text())
    }
    assert families["chainproxy_incidents_open"].samples[0].value == 1.0
