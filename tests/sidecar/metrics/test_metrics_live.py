"""``/metrics`` of the sidecar fed by usage batches with a ``metrics`` section
(aiohttp test client): the contract names (deploy/README.md#metric-names) with the values the
proxies reported, each batch counted once, heartbeats keeping the statistics
fresh, probe results by classification, and every older name still there."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from common.config import Config, parse_config
from common.metrics_wire import REFUSAL_POLICIES
from sidecar.probing.results import ProbeResult
from sidecar.server.app import create_app
from sidecar.server.app_keys import PROBER_KEY, USAGE_KEY
from tests.fakes import FakeClock
from tests.sidecar.deploy_files import deploy_metric_names
from tests.sidecar.metrics_batch import batch_with_metrics, metrics_section
from tests.sidecar.usage.stats.helpers import wire_rollup

T0 = 1_800_000_000.0
USAGE = "/api/v1/internal/usage"


def config(tmp: Path) -> Config:
    nodes = [
        {"url": f"http://127.0.0.1:{port}", "provider": p, "kind": "node-rpc", "network": "finney"}
        for port, p in ((1, "a"), (2, "b"))
    ]
    wss = {"url": "ws://127.0.0.1:9", "provider": "a", "kind": "node-wss", "network": "finney"}
    return parse_config({"data_dir": str(tmp), "registry": {"endpoints": [*nodes, wss]}}, env={})


async def start(aiohttp_client: Any, tmp: Path) -> tuple[Any, Any, FakeClock, Config]:
    clock, cfg = FakeClock(), config(tmp)
    app = create_app(cfg, probing=False, clock=clock)
    return app, await aiohttp_client(app), clock, cfg


async def scrape(client: Any) -> dict[str, Any]:
    r = await client.get("/metrics")
    assert r.status == 200
    return {f.name: f for f in text_string_to_metric_families(await r.text())}


def value(families: dict[str, Any], name: str, **labels: str) -> float:
    family = families[name]
    total = 0.0
    for s in family.samples:
        if s.name in (name, f"{name}_total") and labels.items() <= s.labels.items():
            total += s.value
    return total


def ids(cfg: Config) -> list[str]:
    return [e.id for e in cfg.endpoints if e.kind == "node-rpc"]


async def test_a_batch_fills_the_contract_metrics(aiohttp_client: Any, tmp_path: Path) -> None:
    _app, client, _clock, cfg = await start(aiohttp_client, tmp_path)
    a, b = ids(cfg)
    rollup = wire_rollup(int(T0 // 60), [20.0, 30.0], endpoint=a)
    batch = batch_with_metrics(metrics_section([a, b]), sent_at=T0, rollups=[rollup])
    r = await client.post(USAGE, json=batch)
    assert r.status == 200 and (await r.json())["duplicate"] is False
    f = await scrape(client)
    assert value(f, "chainproxy_requests", network="finney", outcome="ok") == 10
    assert value(f, "chainproxy_requests", outcome="rate_limited") == 1
    assert value(f, "chainproxy_requests", outcome="refused", method="other") == 1
    buckets = {
        s.labels["le"]: s.value
        for s in f["chainproxy_request_duration_seconds"].samples
        if s.name.endswith("_bucket")
    }
    assert buckets["0.005"] == 4 and buckets["0.05"] == 14 and buckets["+Inf"] == 17
    assert value(f, "chainproxy_upstream_attempts", endpoint=a, result="timeout") == 1
    assert value(f, "chainproxy_upstream_attempts", endpoint=b, result="http-5xx") == 1
    assert value(f, "chainproxy_failovers", network="finney") == 1
    assert value(f, "chainproxy_coalesced", network="finney") == 1
    assert value(f, "chainproxy_redis_fallbacks", store="ratelimit") == 2
    assert value(f, "chainproxy_subscription_moves") == 1 and value(f, "chainproxy_hedged") == 1
    assert value(f, "chainproxy_websocket_connections") == 2
    assert value(f, "chainproxy_client_subscriptions", method="chain_subscribeNewHeads") == 3
    assert value(f, "chainproxy_upstream_subscriptions", method="chain_subscribeNewHeads") == 1
    assert (
        value(f, "chainproxy_spool_batches") == 3 and value(f, "chainproxy_proxies_reporting") == 1
    )
    assert value(f, "chainproxy_stats_updated_timestamp_seconds") == T0
    assert value(f, "chainproxy_proxy_requests", network="finney") == 2  # the rollups' count


async def test_a_repeated_batch_is_not_counted_twice(aiohttp_client: Any, tmp_path: Path) -> None:
    _app, client, _clock, cfg = await start(aiohttp_client, tmp_path)
    batch = batch_with_metrics(metrics_section(ids(cfg)), sent_at=T0)
    for _ in range(2):
        assert (await client.post(USAGE, json=batch)).status == 200
    assert (await (await client.post(USAGE, json=batch)).json())["duplicate"] is True
    f = await scrape(client)
    assert value(f, "chainproxy_requests", outcome="ok") == 10
    assert value(f, "chainproxy_failovers") == 1
    assert value(f, "chainproxy_usage_batches", result="duplicate") == 2


async def test_a_bad_metrics_section_is_a_400_and_counts_nothing(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    _app, client, _clock, cfg = await start(aiohttp_client, tmp_path)
    section = metrics_section(ids(cfg))
    section["requests"][0][2] = "fine"
    rollup = wire_rollup(int(T0 // 60), [20.0])
    r = await client.post(USAGE, json=batch_with_metrics(section, sent_at=T0, rollups=[rollup]))
    assert r.status == 400
    assert "outcome 'fine' is not one of" in (await r.json())["error"]["message"]
    f = await scrape(client)
    assert value(f, "chainproxy_requests") == 0 and value(f, "chainproxy_proxy_requests") == 0
    assert value(f, "chainproxy_stats_updated_timestamp_seconds") == 0  # never updated


async def test_heartbeats_keep_the_statistics_fresh(aiohttp_client: Any, tmp_path: Path) -> None:
    _app, client, clock, _cfg = await start(aiohttp_client, tmp_path)
    usage = await (await client.get("/api/v1/usage")).json()
    assert (usage["updated"], usage["freshness"]) == (None, "unknown")
    heartbeat = {"proxy_id": "idle:1", "gauges": {"ws_connections": 0}}
    for minute in range(0, 16):  # a quiet quarter of an hour, one heartbeat a minute
        clock.t = T0 + 60 * minute
        r = await client.post(USAGE, json=batch_with_metrics(heartbeat, sent_at=clock.t))
        assert r.status == 200
        usage = await (await client.get("/api/v1/usage")).json()
        assert usage["freshness"] == "fresh" and usage["requests"] == 0
    assert usage["updated"] == "2027-01-15T08:15:00Z"
    f = await scrape(client)
    assert value(f, "chainproxy_stats_updated_timestamp_seconds") == clock.t
    assert value(f, "chainproxy_proxies_reporting") == 1
    clock.t += 601  # the proxy stops: freshness turns unknown, its gauges drop out
    usage = await (await client.get("/api/v1/usage")).json()
    assert usage["freshness"] == "unknown"
    assert value(await scrape(client), "chainproxy_proxies_reporting") == 0


async def test_probe_results_are_counted_by_endpoint_kind_and_classification(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    app, client, _clock, cfg = await start(aiohttp_client, tmp_path)
    prober = app[PROBER_KEY]
    a, b = (e for e in cfg.endpoints if e.kind == "node-rpc")
    for kind, e, cls in (("full", a, "live"), ("head", a, "live"), ("head", a, "live"),
                         ("full", b, "timeout"), ("full", b, "dead")):  # fmt: skip
        best = 100 if cls == "live" else None
        prober.observe(e, ProbeResult(e.id, T0, kind, cls, 20, best, best))  # type: ignore[arg-type]
    f = await scrape(client)
    assert value(f, "chainproxy_probe_results", endpoint=a.id, kind="head", result="live") == 2
    assert value(f, "chainproxy_probe_results", endpoint=b.id, result="timeout") == 1
    assert value(f, "chainproxy_probe_results", endpoint=b.id, result="dead") == 1
    assert value(f, "chainproxy_healthy_upstreams", network="finney", kind="node-rpc") == 1
    assert value(f, "chainproxy_healthy_upstreams", network="finney", kind="node-wss") == 0
    assert value(f, "chainproxy_max_lag_blocks", network="finney") == 3


# Every name /metrics had before the live metrics: dashboards built on them keep working.
OLDER_NAMES = {
    "chainproxy_endpoint_up", "chainproxy_endpoint_status", "chainproxy_endpoint_latency_ms",
    "chainproxy_endpoint_lag_blocks", "chainproxy_endpoint_best_block",
    "chainproxy_endpoint_consecutive_failures", "chainproxy_chain_tip",
    "chainproxy_chain_finalized", "chainproxy_probes", "chainproxy_proxy_requests",
    "chainproxy_proxy_errors", "chainproxy_proxy_failovers", "chainproxy_proxy_cache_hits",
    "chainproxy_usage_batches", "chainproxy_usage_store_errors",
    "chainproxy_usage_spool_batches", "chainproxy_incidents_open",
}  # fmt: skip


async def test_every_older_metric_name_is_kept(aiohttp_client: Any, tmp_path: Path) -> None:
    app, client, _clock, cfg = await start(aiohttp_client, tmp_path)
    a, b = (e for e in cfg.endpoints if e.kind == "node-rpc")
    app[PROBER_KEY].observe(a, ProbeResult(a.id, T0, "full", "live", 20, 100, 98))
    app[PROBER_KEY].observe(b, ProbeResult(b.id, T0, "full", "live", 20, 99, 98))
    await client.post(USAGE, json=batch_with_metrics(metrics_section(ids(cfg)), sent_at=T0))
    f = await scrape(client)
    assert OLDER_NAMES <= {name for name, family in f.items() if family.samples}


async def test_a_batch_the_store_cannot_take_still_shows_the_spool_growing(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    app, client, _clock, cfg = await start(aiohttp_client, tmp_path)
    app[USAGE_KEY].busy_timeout_ms = 50
    batch = batch_with_metrics(metrics_section(ids(cfg), spool=40), sent_at=T0)
    other = sqlite3.connect(cfg.data_dir / "usage.sqlite3", isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        assert (await client.post(USAGE, json=batch)).status == 503
    finally:
        other.execute("ROLLBACK")
        other.close()
    f = await scrape(client)
    assert value(f, "chainproxy_spool_batches") == 40  # the gauges are news now
    assert value(f, "chainproxy_requests") == 0  # the counters wait for the retry
    assert (await client.post(USAGE, json=batch)).status == 200
    assert value(await scrape(client), "chainproxy_requests", outcome="ok") == 10


async def test_every_metric_the_deploy_files_use_is_exposed(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    app, client, _clock, cfg = await start(aiohttp_client, tmp_path)
    a, b = (e for e in cfg.endpoints if e.kind == "node-rpc")
    app[PROBER_KEY].observe(a, ProbeResult(a.id, T0, "full", "live", 20, 100, 98))
    app[PROBER_KEY].observe(b, ProbeResult(b.id, T0, "full", "dead"))
    await client.post(USAGE, json=batch_with_metrics(metrics_section(ids(cfg)), sent_at=T0))
    exposed = {s.name for f in (await scrape(client)).values() for s in f.samples}
    assert deploy_metric_names() - exposed == set()


async def test_the_dashboard_shows_follows_beside_subscriptions(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    _app, client, _clock, cfg = await start(aiohttp_client, tmp_path)
    section = metrics_section(ids(cfg))
    section["gauges"]["client_subscriptions"] = {
        "chain_subscribeNewHeads": 3,
        "chainHead_v1_follow": 5,
    }
    r = await client.post(USAGE, json=batch_with_metrics(section, sent_at=T0))
    assert r.status == 200
    f = await scrape(client)
    assert value(f, "chainproxy_client_subscriptions", method="chainHead_v1_follow") == 5
    page = await (await client.get("/")).text()
    line = next(x for x in page.splitlines() if "Live now" in x)
    assert "2 WebSocket connection(s)" in line
    assert "3 subscription(s) (chain_subscribeNewHeads 3)" in line
    assert "5 chainHead follow(s)" in line
    section["gauges"]["follow_pinned_blocks"] = {"finney": 42}
    later = batch_with_metrics(section, sent_at=T0 + 1)
    assert (await client.post(USAGE, json=later)).status == 200
    f = await scrape(client)
    assert value(f, "chainproxy_follow_pinned_blocks", network="finney") == 42


async def test_failovers_and_refusals_are_there_at_zero_before_the_first(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    """A sidecar no proxy reported to yet: ``chainproxy_failovers_total`` for
    each served network and ``chainproxy_refusals_total`` for each policy are
    0, not absent (an alert's rate() would read "no data")."""
    _, client, _, _ = await start(aiohttp_client, tmp_path)
    f = await scrape(client)
    failovers = {s.labels["network"]: s.value for s in f["chainproxy_failovers"].samples}
    assert failovers == {"finney": 0.0, "test": 0.0}
    refusals = {s.labels["policy"]: s.value for s in f["chainproxy_refusals"].samples}
    assert set(refusals) == set(REFUSAL_POLICIES) and not any(refusals.values())
