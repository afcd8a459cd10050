"""Chain tip, lag, tiers and the routing snapshot document the addon reads
(the ``/api/v1/internal/routes/<network>`` contract)."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from sidecar.probing.health import Health, chain_heads
from sidecar.probing.horizon import Horizon, observe, plan
from sidecar.registry.routing_snapshot import route, snapshot
from tests.configs import endpoint, make_config
from tests.sidecar.registry.helpers import NOW, by_provider, degraded, ok


def ups(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {u["provider"]: u for u in doc["upstreams"]}


# --- tip and finalized --------------------------------------------------------------------


def test_tip_is_the_highest_best_of_healthy_nodes_including_wss() -> None:
    cfg = make_config(endpoint("a"), endpoint("b"), endpoint("w", kind="node-wss"))
    e = by_provider(cfg)
    health = {
        e["a"].id: ok(100, 97),
        e["b"].id: ok(98, 96),
        e["w"].id: ok(103, 101),  # a WebSocket endpoint counts for the tip
    }
    assert chain_heads(cfg.endpoints, health) == (103, 101)
    doc = snapshot("finney", cfg.endpoints, health, max_lag=3, now=NOW)
    assert (doc["tip"], doc["finalized"]) == (103, 101)
    # ... but is not itself an upstream of the HTTP proxy.
    assert set(ups(doc)) == {"a", "b"}
    assert ups(doc)["a"]["lag"] == 3 and ups(doc)["b"]["lag"] == 5
    # each node's own finalized height (archive_v1_finalizedHeight takes the least)
    assert ups(doc)["a"]["finalized"] == 97 and ups(doc)["b"]["finalized"] == 96


def test_unhealthy_node_with_a_higher_best_does_not_raise_the_tip() -> None:
    cfg = make_config(endpoint("a"), endpoint("bad"), endpoint("new"))
    e = by_provider(cfg)
    health = {
        e["a"].id: ok(100, 98),
        e["bad"].id: degraded(5000, 4998),  # a node on a wrong chain / stale state
        e["new"].id: Health(best=9000, finalized=8999),  # Unknown status
    }
    doc = snapshot("finney", cfg.endpoints, health, max_lag=3, now=NOW)
    assert (doc["tip"], doc["finalized"]) == (100, 98)
    a = ups(doc)["a"]
    assert (a["tier"], a["synced"], a["lag"]) == (0, True, 0)


def test_finalized_is_the_highest_finalized_independently_of_best() -> None:
    cfg = make_config(endpoint("a"), endpoint("b"))
    e = by_provider(cfg)
    health = {e["a"].id: ok(100, 90), e["b"].id: ok(99, 97)}
    assert chain_heads(cfg.endpoints, health) == (100, 97)


def test_non_node_endpoints_do_not_count_for_the_tip() -> None:
    cfg = make_config(
        endpoint("a"), endpoint("art", kind="data-artifact"), endpoint("ev", kind="sse")
    )
    e = by_provider(cfg)
    health = {e["a"].id: ok(100, 98), e["art"].id: ok(500, 499), e["ev"].id: ok(600, 599)}
    doc = snapshot("finney", cfg.endpoints, health, max_lag=3, now=NOW)
    assert (doc["tip"], doc["finalized"]) == (100, 98)
    assert list(ups(doc)) == ["a"]


def test_other_networks_do_not_count_for_the_tip_and_are_not_listed() -> None:
    cfg = make_config(endpoint("f"), endpoint("t", network="test"))
    e = by_provider(cfg)
    health = {e["f"].id: ok(100, 98), e["t"].id: ok(7000, 6998)}
    doc = snapshot("finney", cfg.endpoints, health, max_lag=3, now=NOW)
    assert doc["network"] == "finney"
    assert (doc["tip"], doc["finalized"]) == (100, 98)
    assert list(ups(doc)) == ["f"]
    doc = snapshot("test", cfg.endpoints, health, max_lag=3, now=NOW)
    assert doc["network"] == "test"
    assert (doc["tip"], doc["finalized"]) == (7000, 6998)
    assert list(ups(doc)) == ["t"]


def test_no_healthy_node_means_no_tip() -> None:
    cfg = make_config(endpoint("a"), endpoint("b"))
    e = by_provider(cfg)
    health = {e["a"].id: degraded(100, 98)}
    doc = snapshot("finney", cfg.endpoints, health, max_lag=3, now=NOW)
    assert doc["tip"] is None and doc["finalized"] is None
    a, b = ups(doc)["a"], ups(doc)["b"]
    assert a["lag"] is None and a["synced"] is False and a["tier"] == 3
    assert b["lag"] is None and b["synced"] is False and b["tier"] == 2


# --- lag, synced and tiers ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("best", "max_lag", "synced", "tier"),
    [(100, 3, True, 0), (97, 3, True, 0), (96, 3, False, 1), (100, 0, True, 0), (99, 0, False, 1)],
)
def test_lag_and_synced_use_max_lag(best: int, max_lag: int, synced: bool, tier: int) -> None:
    cfg = make_config(endpoint("top"), endpoint("x"))
    e = by_provider(cfg)
    health = {e["top"].id: ok(100, 98), e["x"].id: ok(best, best - 2)}
    doc = snapshot("finney", cfg.endpoints, health, max_lag=max_lag, now=NOW)
    x = ups(doc)["x"]
    assert x["lag"] == 100 - best
    assert x["synced"] is synced
    assert x["tier"] == tier
    assert x["healthy"] is True


def test_tiers_synced_lagging_unprobed_unhealthy_in_that_order() -> None:
    cfg = make_config(endpoint("dead"), endpoint("fresh"), endpoint("lagging"), endpoint("synced"))
    e = by_provider(cfg)
    health = {
        e["dead"].id: degraded(100, 98, latency_ms=5.0),
        e["lagging"].id: ok(90, 88, latency_ms=10.0),
        e["synced"].id: ok(100, 98, latency_ms=900.0),
        # "fresh" has no health at all: never probed
    }
    doc = snapshot("finney", cfg.endpoints, health, max_lag=3, now=NOW)
    assert [(u["provider"], u["tier"]) for u in doc["upstreams"]] == [
        ("synced", 0),
        ("lagging", 1),
        ("fresh", 2),
        ("dead", 3),
    ]
    fresh = ups(doc)["fresh"]
    assert fresh["healthy"] is False and fresh["latency_ms"] is None and fresh["lag"] is None


def test_probed_once_and_failed_is_last_resort_not_unprobed() -> None:
    cfg = make_config(endpoint("a"), endpoint("once"))
    e = by_provider(cfg)
    one_failure = Health(classification="timeout", consecutive_failures=1, last_probe_at=NOW)
    health = {e["a"].id: ok(100, 98), e["once"].id: one_failure}
    doc = snapshot("finney", cfg.endpoints, health, max_lag=3, now=NOW)
    assert ups(doc)["once"]["tier"] == 3
    assert ups(doc)["once"]["healthy"] is False


def test_healthy_node_without_a_known_height_is_not_synced() -> None:
    cfg = make_config(endpoint("a"), endpoint("nohead"))
    e = by_provider(cfg)
    health = {e["a"].id: ok(100, 98), e["nohead"].id: ok(None, None)}
    doc = snapshot("finney", cfg.endpoints, health, max_lag=3, now=NOW)
    n = ups(doc)["nohead"]
    assert n["lag"] is None and n["synced"] is False and n["tier"] == 1


def test_within_a_tier_faster_first_and_unknown_latency_last() -> None:
    cfg = make_config(endpoint("slow"), endpoint("mid"), endpoint("fast"), endpoint("untimed"))
    e = by_provider(cfg)
    health = {
        e["slow"].id: ok(100, 98, latency_ms=300.0),
        e["mid"].id: ok(100, 98, latency_ms=120.4),
        e["fast"].id: ok(99, 97, latency_ms=15.6),
        e["untimed"].id: ok(100, 98),
    }
    doc = snapshot("finney", cfg.endpoints, health, max_lag=3, now=NOW)
    assert [u["provider"] for u in doc["upstreams"]] == ["fast", "mid", "slow", "untimed"]
    assert [u["latency_ms"] for u in doc["upstreams"]] == [16, 120, 300, None]
    assert {u["tier"] for u in doc["upstreams"]} == {0}


def test_order_is_deterministic_for_equal_tier_and_latency() -> None:
    cfg = make_config(*(endpoint(f"n{i}") for i in range(6)))
    health = {e.id: ok(100, 98, latency_ms=50.0) for e in cfg.endpoints}
    first = snapshot("finney", cfg.endpoints, health, max_lag=3, now=NOW)
    second = snapshot("finney", tuple(reversed(cfg.endpoints)), health, max_lag=3, now=NOW)
    assert [u["id"] for u in first["upstreams"]] == [u["id"] for u in second["upstreams"]]


# --- archive, url, score ------------------------------------------------------------------


def test_conclusive_archive_probe_overrides_the_config_flag() -> None:
    cfg = make_config(
        endpoint("said_yes", archive=True), endpoint("said_no"), endpoint("untested", archive=True)
    )
    e = by_provider(cfg)
    health = {
        e["said_yes"].id: ok(100, 98, archive=False),  # configured archive, but prunes
        e["said_no"].id: ok(100, 98, archive=True),  # not configured, but keeps history
        e["untested"].id: ok(100, 98),  # no conclusive check: the config decides
    }
    u = ups(snapshot("finney", cfg.endpoints, health, max_lag=3, now=NOW))
    assert u["said_yes"]["archive"] is False
    assert u["said_no"]["archive"] is True
    assert u["untested"]["archive"] is True


def test_each_upstream_carries_its_measured_state_horizon() -> None:
    """The horizon fields are added to the contract: a pruned node's (keeps
    the last K blocks, measured at its best), an archive's, an unmeasured one's;
    ``archive`` follows the horizon whatever the config says."""
    cfg = make_config(
        endpoint("pruned", archive=True), endpoint("arch"), endpoint("unmeasured", archive=True)
    )
    e = by_provider(cfg)
    pruned = Horizon()
    for best in range(1000, 1030):  # keeps the last 100 blocks; the chain moves
        blocks = plan(pruned, best)
        pruned = observe(pruned, best, [(n, best - n < 100) for n in blocks], archive=False)
    assert pruned.exact and pruned.keeps == 100
    health = {
        e["pruned"].id: ok(1050, 1048, horizon=pruned),
        e["arch"].id: ok(1050, 1048, horizon=observe(Horizon(), 1050, [], archive=True)),
        e["unmeasured"].id: ok(1050, 1048),
    }
    u = ups(snapshot("finney", cfg.endpoints, health, max_lag=3, now=NOW))
    assert {k: u["pruned"][k] for k in ("archive", "horizon", "horizon_lost", "keeps")} == {
        "archive": False,
        "horizon": 951,  # at its best 1050: the last 100 blocks, 951..1050
        "horizon_lost": 950,
        "keeps": 100,
    }
    assert u["pruned"]["horizon_rounds"] == 30
    assert (u["arch"]["archive"], u["arch"]["horizon"], u["arch"]["keeps"]) == (True, 0, None)
    assert u["arch"]["horizon_lost"] is None and u["arch"]["horizon_rounds"] == 1
    assert (u["unmeasured"]["horizon"], u["unmeasured"]["horizon_rounds"]) == (None, 0)
    assert u["unmeasured"]["archive"] is True  # not measured: the config's flag


def test_unprobed_endpoint_takes_archive_from_the_config() -> None:
    cfg = make_config(endpoint("arch", archive=True), endpoint("plain"))
    u = ups(snapshot("finney", cfg.endpoints, {}, max_lag=3, now=NOW))
    assert u["arch"]["archive"] is True and u["plain"]["archive"] is False


def test_url_is_redacted_and_secrets_never_appear() -> None:
    cfg = make_config(
        {
            "url": "https://rpc.example.org/v1/?apikey=SECRET",
            "provider": "keyed",
            "kind": "node-rpc",
            "network": "finney",
        },
        {
            "url": "https://user:hunter2@rpc2.example.org/a1b2c3d4e5f6a7b8c9d0e1f2a3b4",
            "provider": "path",
            "kind": "node-rpc",
            "network": "finney",
        },
    )
    e = by_provider(cfg)
    health = {e["keyed"].id: ok(100, 98)}
    doc = snapshot("finney", cfg.endpoints, health, max_lag=3, now=NOW)
    text = repr(doc)
    for secret in ("SECRET", "hunter2", "a1b2c3d4e5f6a7b8c9d0e1f2a3b4"):
        assert secret not in text
    u = ups(doc)
    assert u["keyed"]["url"] == e["keyed"].safe_url
    assert u["keyed"]["url"].startswith("https://rpc.example.org/v1")
    assert "apikey=" in u["keyed"]["url"]
    assert u["path"]["url"].startswith("https://rpc2.example.org/")
    # The id is the same one the addon derives from its own config.
    assert u["keyed"]["id"] == e["keyed"].id


def test_score_is_the_probe_success_share_rounded() -> None:
    cfg = make_config(endpoint("a"))
    (a,) = cfg.endpoints
    h = Health(
        status="OK", last_probe_at=NOW, best=100, recent=(True, True, False), latency_ms=10.0
    )
    u = ups(snapshot("finney", cfg.endpoints, {a.id: h}, max_lag=3, now=NOW))["a"]
    assert u["score"] == pytest.approx(0.667)
    assert ups(snapshot("finney", cfg.endpoints, {}, max_lag=3, now=NOW))["a"]["score"] == 1.0


def test_route_for_a_missing_health_is_unprobed() -> None:
    cfg = make_config(endpoint("a"))
    r = route(cfg.endpoints[0], None, 100, 3)
    assert (r.tier, r.healthy, r.synced, r.lag, r.status) == (2, False, False, None, "Unknown")


# --- the contract document ------------------------------------------------------------------


def test_generated_at_is_iso_utc_ending_in_z() -> None:
    doc = snapshot("finney", (), {}, max_lag=3, now=NOW)
    assert doc["generated_at"] == "2023-11-14T22:13:20Z"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", doc["generated_at"])
    parsed = datetime.fromisoformat(doc["generated_at"].replace("Z", "+00:00"))
    assert parsed == datetime.fromtimestamp(NOW, UTC)


def test_empty_network_is_a_valid_document() -> None:
    doc = snapshot("test", (), {}, max_lag=3, now=NOW)
    assert doc["upstreams"] == [] and doc["tip"] is None and doc["network"] == "test"


def test_every_contract_field_is_present_with_the_right_type() -> None:
    cfg = make_config(endpoint("a", archive=True), endpoint("b"), endpoint("c"), endpoint("d"))
    e = by_provider(cfg)
    health = {
        e["a"].id: ok(100, 98, latency_ms=12.7),
        e["b"].id: ok(50, 48, latency_ms=40.0),
        e["c"].id: degraded(100, 98),
    }
    doc = snapshot("finney", cfg.endpoints, health, max_lag=3, now=NOW)
    assert {"network", "tip", "finalized", "generated_at", "upstreams"} <= set(doc)
    assert isinstance(doc["network"], str)
    assert type(doc["tip"]) is int and type(doc["finalized"]) is int
    assert isinstance(doc["generated_at"], str)
    assert isinstance(doc["upstreams"], list) and len(doc["upstreams"]) == 4
    contract = {
        "id",
        "url",
        "provider",
        "archive",
        "healthy",
        "synced",
        "lag",
        "latency_ms",
        "score",
        "tier",
    }
    for u in doc["upstreams"]:
        assert contract <= set(u), contract - set(u)
        assert isinstance(u["id"], str) and u["id"].startswith("endpoint-srf-")
        assert isinstance(u["url"], str) and isinstance(u["provider"], str)
        assert type(u["archive"]) is bool
        assert type(u["healthy"]) is bool
        assert type(u["synced"]) is bool
        assert u["lag"] is None or type(u["lag"]) is int
        assert u["latency_ms"] is None or type(u["latency_ms"]) is int  # integer ms
        assert type(u["score"]) is float and 0.0 <= u["score"] <= 1.0
        assert type(u["tier"]) is int and u["tier"] in (0, 1, 2, 3)
    u = ups(doc)
    assert u["a"]["latency_ms"] == 13
    assert [u[p]["tier"] for p in "abcd"] == [0, 1, 3, 2]


def test_the_document_is_json_serialisable() -> None:
    import json

    cfg = make_config(endpoint("a"), endpoint("b"))
    e = by_provider(cfg)
    health = {e["a"].id: ok(100, 98, latency_ms=12.0, archive=True)}
    doc = snapshot("finney", cfg.endpoints, health, max_lag=3, now=NOW)
    assert json.loads(json.dumps(doc)) == doc
