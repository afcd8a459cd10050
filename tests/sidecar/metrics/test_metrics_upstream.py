"""``/metrics`` shows how close each node runs to its capacity (aiohttp test
client): the budgets from the config, what the proxies sent it in the last
second, the rate they learned from its 429s, how long it still backs off, and
the waits, back-offs and ``upstream_capacity`` refusals they counted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from common.config import Config, parse_config
from common.metrics_wire import REFUSAL_POLICIES
from sidecar.server.app import create_app
from tests.fakes import FakeClock
from tests.sidecar.metrics_batch import batch_with_metrics

T0 = 1_800_000_000.0
USAGE = "/api/v1/internal/usage"
NEW_FAMILIES = (
    "chainproxy_upstream_waits",
    "chainproxy_upstream_backoffs",
    "chainproxy_upstream_calls_last_second",
    "chainproxy_upstream_learned_rps",
    "chainproxy_upstream_backoff_seconds",
    "chainproxy_upstream_budget_rps",
    "chainproxy_upstream_budget_concurrency",
)


def config(tmp: Path) -> Config:
    limited = {"url": "http://127.0.0.1:1", "provider": "a", "kind": "node-rpc",
               "network": "finney", "max_rps": 20, "max_concurrency": 8}  # fmt: skip
    free = {"url": "http://127.0.0.1:2", "provider": "b", "kind": "node-rpc", "network": "finney"}
    return parse_config({"data_dir": str(tmp), "registry": {"endpoints": [limited, free]}}, env={})


async def start(aiohttp_client: Any, tmp: Path) -> tuple[Any, FakeClock, list[str]]:
    clock, cfg = FakeClock(T0), config(tmp)
    client = await aiohttp_client(create_app(cfg, probing=False, clock=clock))
    return client, clock, [e.id for e in cfg.endpoints]


async def scrape(client: Any) -> tuple[str, dict[str, Any]]:
    r = await client.get("/metrics")
    assert r.status == 200
    text = await r.text()
    return text, {f.name: f for f in text_string_to_metric_families(text)}


def samples(families: dict[str, Any], name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s.labels.items())): s.value for s in families[name].samples}


def section(proxy_id: str, a: str, b: str, *, backoff_s: int) -> dict[str, Any]:
    """A proxy that waited for A's budget and got pushed back by B."""
    return {
        "proxy_id": proxy_id,
        "extra": [
            ["chainproxy_upstream_waits_total", {"network": "finney"}, 4],
            ["chainproxy_upstream_backoffs_total", {"endpoint": b, "reason": "rate-limited"}, 1],
            ["chainproxy_refusals_total", {"policy": "upstream_capacity"}, 2],
        ],
        "gauges": {
            "upstream_sent_last_s": {a: 19, b: 0},
            "upstream_learned_rps": {b: 6},
            "upstream_backoff_s": {b: backoff_s},
        },
    }


async def test_the_nodes_capacity_is_in_the_metrics(aiohttp_client: Any, tmp_path: Path) -> None:
    client, clock, (a, b) = await start(aiohttp_client, tmp_path)
    for proxy_id, backoff_s in (("m1:10", 30), ("m2:10", 12)):
        batch = batch_with_metrics(section(proxy_id, a, b, backoff_s=backoff_s), sent_at=T0)
        assert (await client.post(USAGE, json=batch)).status == 200
    clock.t = T0 + 5
    text, f = await scrape(client)
    assert samples(f, "chainproxy_upstream_waits") == {(("network", "finney"),): 8}
    assert samples(f, "chainproxy_upstream_backoffs") == {
        (("endpoint", b), ("reason", "rate-limited")): 2
    }
    refusals = samples(f, "chainproxy_refusals")
    assert refusals[(("policy", "upstream_capacity"),)] == 4
    # every other policy at 0 before its first refusal: a rate() has a series to read
    assert {k: v for k, v in refusals.items() if v} == {(("policy", "upstream_capacity"),): 4}
    assert len(refusals) == len(REFUSAL_POLICIES)
    assert samples(f, "chainproxy_upstream_calls_last_second") == {
        (("endpoint", a),): 38, (("endpoint", b),): 0,
    }  # fmt: skip
    # two proxies reporting 6 each: one rate (with Redis, the deployment's), not 12
    assert samples(f, "chainproxy_upstream_learned_rps") == {(("endpoint", b),): 6}
    assert samples(f, "chainproxy_upstream_backoff_seconds") == {(("endpoint", b),): 25}
    # The budgets come from the sidecar's own config; an unlimited node has no series.
    assert samples(f, "chainproxy_upstream_budget_rps") == {(("endpoint", a),): 20}
    assert samples(f, "chainproxy_upstream_budget_concurrency") == {(("endpoint", a),): 8}
    for name in NEW_FAMILIES:
        assert f"# HELP {name}" in text and f[name].documentation, name

    clock.t = T0 + 30  # the back-off is over: no row rather than a zero
    _, f = await scrape(client)
    assert samples(f, "chainproxy_upstream_backoff_seconds") == {}
    clock.t = T0 + 120  # both proxies silent for the gauges' TTL: their reports drop out
    _, f = await scrape(client)
    assert samples(f, "chainproxy_upstream_calls_last_second") == {}
    assert samples(f, "chainproxy_upstream_learned_rps") == {}
    assert samples(f, "chainproxy_upstream_waits") == {(("network", "finney"),): 8}  # counters stay
    assert samples(f, "chainproxy_upstream_budget_rps") == {(("endpoint", a),): 20}


async def test_the_budgets_are_exposed_before_any_proxy_reports(
    aiohttp_client: Any, tmp_path: Path
) -> None:
    client, _clock, (a, _b) = await start(aiohttp_client, tmp_path)
    text, f = await scrape(client)
    assert samples(f, "chainproxy_upstream_budget_rps") == {(("endpoint", a),): 20}
    assert samples(f, "chainproxy_upstream_backoff_seconds") == {}
    assert "# TYPE chainproxy_upstream_waits_total counter" in text
