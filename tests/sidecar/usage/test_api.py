"""``POST /api/v1/internal/usage`` and ``GET /api/v1/usage`` through the app."""

from __future__ import annotations

import json
import math
import random
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import pytest

from common.config import Config
from sidecar.jsonfmt import iso
from sidecar.server.app import create_app
from sidecar.server.app_keys import USAGE_KEY
from sidecar.server.handlers import usage as usage_api
from sidecar.usage.stats.window import WINDOW_S, window_start_minute
from tests.fakes import FakeClock
from tests.sidecar.helpers import fake_factory
from tests.sidecar.usage.helpers import (
    MINUTE,
    NOW,
    URL,
    get_usage,
    usage_client,
    usage_config,
    wire_batch,
)
from tests.sidecar.usage.stats.helpers import wire_rollup


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW)


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return usage_config(tmp_path)


async def _post(client: Any, doc: Any, **kw: Any) -> Any:
    return await client.post(URL, json=doc, **kw)


def _ids(config: Config) -> dict[str, str]:
    """Port -> endpoint id."""
    return {e.url.rsplit(":", 1)[1]: e.id for e in config.endpoints}


# --- the summary ---------------------------------------------------------------------------


async def test_empty_usage_has_the_contract_shape(
    aiohttp_client: Any, config: Config, clock: FakeClock
) -> None:
    client = await usage_client(aiohttp_client, config, clock)
    doc = await get_usage(client)
    assert doc == {
        "window_s": 604800,
        "requests": 0,
        "p50_ms": None,
        "p95_ms": None,
        "success": {"count": 0, "pct": 0},
        "errors": {"count": 0, "pct": 0},
        "failover": {"count": 0, "pct": 0},
        "cache_hits": {"count": 0, "pct": 0},
        "by_network": {"finney": 0, "test": 0},
        "endpoints": [],
        "methods": [],
        "updated": None,
        "freshness": "unknown",
    }


async def test_counts_labels_and_types_for_known_batches(
    aiohttp_client: Any, config: Config, clock: FakeClock
) -> None:
    client = await usage_client(aiohttp_client, config, clock)
    ids = _ids(config)
    batches = [
        [
            wire_rollup(MINUTE, [100] * 8, endpoint=ids["1"], errors=2, failovers=1),
            wire_rollup(MINUTE, [300] * 4, endpoint=ids["2"], method="state_getStorage"),
            wire_rollup(MINUTE, [1] * 6, endpoint=None, cache_hits=6),
        ],
        [
            wire_rollup(MINUTE - 5, [100] * 2, endpoint=ids["1"]),  # another minute, same endpoint
            wire_rollup(MINUTE, [50] * 3, endpoint=ids["3"], errors=3, failovers=3),
            wire_rollup(MINUTE, [60] * 3, endpoint=ids["4"]),
            wire_rollup(MINUTE, [40] * 5, network="test", endpoint=ids["5"], errors=1),
        ],
    ]
    for rollups in batches:
        r = await _post(client, wire_batch(rollups))
        assert r.status == 200
        assert await r.json() == {"accepted": True, "duplicate": False, "rollups": len(rollups)}

    doc = await get_usage(client)
    assert doc["requests"] == 31
    assert doc["success"] == {"count": 25, "pct": 80.65}
    assert doc["errors"] == {"count": 6, "pct": 19.35}
    assert doc["failover"] == {"count": 4, "pct": 12.9}
    assert doc["cache_hits"] == {"count": 6, "pct": 19.35}
    assert doc["by_network"] == {"finney": 26, "test": 5}
    assert doc["updated"] == "2025-11-21T04:40:00Z" and doc["freshness"] == "fresh"
    assert isinstance(doc["p50_ms"], int) and isinstance(doc["p95_ms"], int)
    rows = {row["endpoint"]: row for row in doc["endpoints"]}
    assert [row["endpoint"] for row in doc["endpoints"]] == [
        "opentensor-finney-rpc",
        "opentensor-test-rpc",
        "opentensor-archive-rpc",
        *sorted(["onfinality-finney-rpc", "onfinality-finney-rpc-2"]),
    ]
    assert rows["opentensor-finney-rpc"] == {
        "endpoint": "opentensor-finney-rpc",
        "id": ids["1"],
        "provider": "opentensor",
        "requests": 10,
        "share_pct": 40.0,
        "errors_pct": 20.0,
        "avg_latency_ms": 100,
    }
    assert rows["opentensor-archive-rpc"]["id"] == ids["2"]
    assert rows["opentensor-archive-rpc"]["avg_latency_ms"] == 300
    # The two onfinality finney endpoints: the suffix follows id order.
    first, second = sorted([ids["3"], ids["4"]])
    assert rows["onfinality-finney-rpc"]["id"] == first
    assert rows["onfinality-finney-rpc-2"]["id"] == second
    assert rows["onfinality-finney-rpc"]["errors_pct"] == (100.0 if first == ids["3"] else 0.0)
    assert math.isclose(sum(row["share_pct"] for row in doc["endpoints"]), 100, abs_tol=0.05)
    for row in doc["endpoints"]:
        assert isinstance(row["requests"], int) and isinstance(row["avg_latency_ms"], int)
        assert isinstance(row["share_pct"], int | float) and 0 <= row["share_pct"] <= 100

    # ?network= narrows everything but by_network.
    test = await get_usage(client, "?network=test")
    assert test["requests"] == 5 and test["errors"] == {"count": 1, "pct": 20.0}
    assert test["by_network"] == {"finney": 26, "test": 5}
    assert [row["endpoint"] for row in test["endpoints"]] == ["opentensor-test-rpc"]
    assert test["endpoints"][0]["share_pct"] == 100.0 and test["p50_ms"] == 40
    finney = await get_usage(client, "?network=finney")
    assert finney["requests"] == 26 and len(finney["endpoints"]) == 4
    assert (await get_usage(client, "?network="))["requests"] == 31  # empty = all
    twice = await client.get("/api/v1/usage?network=finney&network=test")
    assert twice.status == 400 and "once" in (await twice.json())["error"]["message"]


async def test_the_methods_that_cost_most_units(
    aiohttp_client: Any, config: Config, clock: FakeClock
) -> None:
    """``methods``: the top methods by quota units, their share of all units;
    a rollup without ``units`` (a proxy of before) counts none."""
    client = await usage_client(aiohttp_client, config, clock)
    ids = _ids(config)
    old = wire_rollup(MINUTE, [5] * 4, endpoint=ids["1"], method="system_health")
    rollups = [
        {**wire_rollup(MINUTE, [5] * 3, endpoint=ids["1"], method="state_call"), "units": 51},
        {**wire_rollup(MINUTE, [5] * 9, endpoint=ids["1"]), "units": 9},
        {**wire_rollup(MINUTE, [5] * 2, network="test", endpoint=ids["5"]), "units": 2},
        old,
    ]
    r = await _post(client, wire_batch(rollups))
    assert r.status == 200
    doc = await get_usage(client)
    assert doc["methods"] == [
        {"method": "state_call", "requests": 3, "units": 51, "units_pct": 82.26},
        {"method": "chain_getHeader", "requests": 11, "units": 11, "units_pct": 17.74},
        {"method": "system_health", "requests": 4, "units": 0, "units_pct": 0.0},
    ]
    test = await get_usage(client, "?network=test")
    assert test["methods"] == [
        {"method": "chain_getHeader", "requests": 2, "units": 2, "units_pct": 100.0}
    ]


async def test_unknown_network_is_a_404_json_error(
    aiohttp_client: Any, config: Config, clock: FakeClock
) -> None:
    client = await usage_client(aiohttp_client, config, clock)
    r = await client.get("/api/v1/usage?network=mars")
    assert r.status == 404
    body = await r.json()
    assert body["error"]["code"] == 404 and "mars" in body["error"]["message"]


async def test_p50_p95_are_within_2_percent_of_the_exact_quantiles(
    aiohttp_client: Any, config: Config, clock: FakeClock
) -> None:
    client = await usage_client(aiohttp_client, config, clock)
    ids = _ids(config)
    rng = random.Random(42)
    everything: list[float] = []
    for i in range(20):  # 20 batches over many minutes, endpoints and methods
        rollups = []
        for j, port in enumerate(("1", "2", "3", "5")):
            lat = [rng.lognormvariate(5.0 + 0.3 * j, 0.7) for _ in range(rng.randint(20, 80))]
            everything += lat
            net = "test" if port == "5" else "finney"
            rollups.append(
                wire_rollup(
                    MINUTE - i * 37, lat, network=net, endpoint=ids[port], method=f"m{i % 3}"
                )
            )
        assert (await _post(client, wire_batch(rollups))).status == 200
    doc = await get_usage(client)
    ordered = sorted(everything)
    for q, key in ((0.5, "p50_ms"), (0.95, "p95_ms")):
        exact = ordered[max(1, math.ceil(q * len(ordered))) - 1]
        assert abs(doc[key] - exact) <= 0.02 * exact, (key, doc[key], exact)
    assert doc["requests"] == len(everything)


async def test_a_duplicate_batch_is_not_counted_twice(
    aiohttp_client: Any, config: Config, clock: FakeClock
) -> None:
    client = await usage_client(aiohttp_client, config, clock)
    doc = wire_batch([wire_rollup(MINUTE, [10] * 5, endpoint=_ids(config)["1"])])
    assert (await (await _post(client, doc)).json())["duplicate"] is False
    r = await _post(client, doc)
    assert r.status == 200
    assert await r.json() == {"accepted": True, "duplicate": True, "rollups": 1}
    assert (await get_usage(client))["requests"] == 5
    svc = client.app[USAGE_KEY]
    assert (svc.batches_accepted, svc.batches_duplicate, svc.records) == (1, 1, 5)


def _bad_docs(ids: dict[str, str]) -> list[tuple[str, Any, str]]:
    def one(**kw: Any) -> dict[str, Any]:
        r = wire_rollup(MINUTE, [10, 20], endpoint=ids["1"])
        r.update(kw)
        return wire_batch([r])

    return [
        ("batch_id", {**wire_batch([]), "batch_id": "nope"}, "batch_id"),
        ("sent_at", {"batch_id": uuid.uuid4().hex, "rollups": []}, "sent_at"),
        ("rollups type", {**wire_batch([]), "rollups": "x"}, "rollups"),
        ("missing field", wire_batch([{"minute": MINUTE}]), "required"),
        ("type", one(requests="2"), "rollups[1].requests"),
        ("negative", one(errors=-1), "rollups[1].errors"),
        ("errors > requests", one(errors=3), "errors (3) > requests (2)"),
        ("failovers > requests", one(failovers=3), "failovers"),
        ("cache_hits > requests", one(cache_hits=3), "cache_hits"),
        ("units type", one(units=1.5), "rollups[1].units"),
        ("units negative", one(units=-1), "rollups[1].units"),
        ("hist total", one(latency_hist={"5": 1}), "latency_hist"),
        ("hist bucket", one(latency_hist={"abc": 2}), "bucket"),
        ("network", one(network=7), "rollups[1].network"),
        ("endpoint", one(endpoint="http://evil"), "rollups[1].endpoint"),
        ("future", one(minute=MINUTE + 600), "future"),
        ("too many", wire_batch([wire_rollup(MINUTE, [1])] * 10_001), "too many rollups"),
        ("not an object", [1, 2], "JSON object"),
    ]


async def test_bad_batches_are_refused_with_400_and_nothing_is_stored(
    aiohttp_client: Any, config: Config, clock: FakeClock
) -> None:
    client = await usage_client(aiohttp_client, config, clock)
    ids = _ids(config)
    for name, doc, message in _bad_docs(ids):
        if isinstance(doc, dict) and isinstance(doc.get("rollups"), list) and doc["rollups"]:
            # A good rollup first (so the bad one is rollups[1]): the whole batch
            # must still be refused.
            doc["rollups"].insert(0, wire_rollup(MINUTE, [5], endpoint=ids["1"]))
        r = await _post(client, doc)
        assert r.status == 400, name
        body = await r.json()
        assert body["error"]["code"] == 400 and message in body["error"]["message"], (name, body)
    r = await client.post(URL, data=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status == 400 and "not JSON" in (await r.json())["error"]["message"]
    r = await client.post(URL, data=b"\xff\xfe\x00")
    assert r.status == 400
    doc = await get_usage(client)
    assert doc["requests"] == 0 and doc["updated"] is None
    svc = client.app[USAGE_KEY]
    assert svc.batches_rejected == len(_bad_docs(ids)) + 2 and svc.batches_accepted == 0


async def test_a_body_over_the_limit_is_a_413(
    aiohttp_client: Any, config: Config, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(usage_api, "MAX_BODY_BYTES", 2000)
    client = await usage_client(aiohttp_client, config, clock)
    doc = wire_batch([wire_rollup(MINUTE, [5], endpoint=None)] * 20)
    r = await _post(client, doc)
    assert r.status == 413 and "2000 bytes" in (await r.json())["error"]["message"]

    async def chunks() -> Any:  # no Content-Length: the limit holds while streaming
        body = json.dumps(doc).encode()
        for i in range(0, len(body), 500):
            yield body[i : i + 500]

    r = await client.post(URL, data=chunks())
    assert r.status == 413


async def test_a_batch_over_1_mib_is_accepted(
    aiohttp_client: Any, config: Config, clock: FakeClock
) -> None:
    """The app-wide 1 MiB request limit does not cut a full-size batch."""
    client = await usage_client(aiohttp_client, config, clock)
    ids = _ids(config)
    rng = random.Random(1)
    rollups = [
        wire_rollup(
            MINUTE - i % 600,
            [rng.uniform(10, 2000) for _ in range(40)],
            endpoint=ids["1"],
            method=f"m{i // 600}",
        )
        for i in range(3000)
    ]
    doc = wire_batch(rollups)
    assert len(json.dumps(doc)) > 1_048_576
    r = await _post(client, doc)
    assert r.status == 200, await r.text()
    assert (await get_usage(client))["requests"] == 3000 * 40


async def test_the_internal_path_needs_the_token_when_set(
    aiohttp_client: Any, tmp_path: Path, clock: FakeClock
) -> None:
    config = usage_config(tmp_path, token="s3cret")
    client = await usage_client(aiohttp_client, config, clock)
    doc = wire_batch([wire_rollup(MINUTE, [5], endpoint=None)])
    assert (await _post(client, doc)).status == 401
    assert (await _post(client, doc, headers={"Authorization": "Bearer nope"})).status == 401
    assert (await get_usage(client))["requests"] == 0
    r = await _post(client, doc, headers={"Authorization": "Bearer s3cret"})
    assert r.status == 200
    assert (await get_usage(client))["requests"] == 1  # the public summary needs no token


async def test_updated_freshness_and_the_window_follow_the_clock(
    aiohttp_client: Any, config: Config, clock: FakeClock
) -> None:
    client = await usage_client(aiohttp_client, config, clock)
    ep = _ids(config)["1"]
    start = window_start_minute(NOW)
    rollups = [
        wire_rollup(start, [10], endpoint=ep),
        wire_rollup(start + 1, [10] * 2, endpoint=ep),
        wire_rollup(MINUTE, [10] * 4, endpoint=ep),
    ]
    assert (await _post(client, wire_batch(rollups))).status == 200
    doc = await get_usage(client)
    assert doc["requests"] == 7 and doc["updated"] == iso(NOW) and doc["freshness"] == "fresh"
    clock.t = NOW + 60  # the oldest minute leaves the window
    assert (await get_usage(client))["requests"] == 6
    clock.t = NOW + 600
    doc = await get_usage(client)
    assert doc["requests"] == 4 and doc["freshness"] == "fresh"
    clock.t = NOW + 601
    doc = await get_usage(client)
    assert doc["freshness"] == "unknown" and doc["updated"] == iso(NOW)
    # An empty batch is a heartbeat: fresh again.
    assert (await _post(client, wire_batch([]))).status == 200
    doc = await get_usage(client)
    assert doc["freshness"] == "fresh" and doc["updated"] == iso(NOW + 601)
    clock.t = NOW + WINDOW_S + 61
    doc = await get_usage(client)
    assert doc["requests"] == 0 and doc["p50_ms"] is None and doc["endpoints"] == []


async def test_a_restart_keeps_the_usage_and_updated(
    aiohttp_client: Any, config: Config, clock: FakeClock
) -> None:
    client = await usage_client(aiohttp_client, config, clock)
    doc = wire_batch([wire_rollup(MINUTE, [10, 20, 30], endpoint=_ids(config)["3"])])
    assert (await _post(client, doc)).status == 200
    before = await get_usage(client)
    await client.close()

    client2 = await usage_client(aiohttp_client, config, clock)
    assert await get_usage(client2) == before
    assert (await (await _post(client2, doc)).json())["duplicate"] is True


async def test_a_locked_database_answers_503_and_the_retry_counts_once(
    aiohttp_client: Any, config: Config, clock: FakeClock
) -> None:
    app = create_app(config, probing=False, probe_factory=fake_factory({}), clock=clock)
    app[USAGE_KEY].busy_timeout_ms = 50
    client = await aiohttp_client(app)
    doc = wire_batch([wire_rollup(MINUTE, [10] * 3, endpoint=None)])
    other = sqlite3.connect(config.data_dir / "usage.sqlite3", isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        r = await _post(client, doc)
        assert r.status == 503 and r.headers["Retry-After"] == "10"
        assert (await r.json())["error"]["code"] == 503
    finally:
        other.execute("ROLLBACK")
        other.close()
    svc = app[USAGE_KEY]
    assert svc.batches_failed == 1 and svc.store_errors == 1
    r = await _post(client, doc)
    assert (await r.json())["duplicate"] is False
    assert (await get_usage(client))["requests"] == 3


async def test_wrong_methods_are_json_errors(
    aiohttp_client: Any, config: Config, clock: FakeClock
) -> None:
    client = await usage_client(aiohttp_client, config, clock)
    r = await client.get(URL)
    assert r.status == 405 and r.content_type == "application/json"
    r = await client.post("/api/v1/usage")
    assert r.status == 405 and r.content_type == "application/json"


async def test_a_corrupt_database_is_set_aside_at_start(
    aiohttp_client: Any, config: Config, clock: FakeClock
) -> None:
    config.data_dir.mkdir(parents=True, exist_ok=True)
    (config.data_dir / "usage.sqlite3").write_bytes(b"not a database" * 500)
    client = await usage_client(aiohttp_client, config, clock)
    doc = wire_batch([wire_rollup(MINUTE, [10] * 2, endpoint=None)])
    assert (await _post(client, doc)).status == 200
    assert (await get_usage(client))["requests"] == 2
    aside = list(config.data_dir.glob("usage.sqlite3.corrupt-*"))
    assert len(aside) == 1 and aside[0].read_bytes().startswith(b"not a database")


async def test_an_unusable_database_answers_503_and_the_rest_of_the_app_runs(
    aiohttp_client: Any, config: Config, clock: FakeClock
) -> None:
    (config.data_dir / "usage.sqlite3").mkdir(parents=True)  # a directory: cannot be opened
    client = await usage_client(aiohttp_client, config, clock)
    assert (await client.get("/healthz")).status == 200
    r = await client.get("/api/v1/usage")
    assert r.status == 503 and (await r.json())["error"]["code"] == 503
    r = await _post(client, wire_batch([wire_rollup(MINUTE, [10], endpoint=None)]))
    assert r.status == 503 and r.headers["Retry-After"] == "10"
