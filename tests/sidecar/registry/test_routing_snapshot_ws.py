"""The routing snapshot's ``ws_upstreams``: node-wss endpoints ranked by the
same rules as node-rpc ones, for the proxy's subscriptions."""

from __future__ import annotations

from sidecar.registry.routing_snapshot import snapshot
from tests.configs import endpoint, make_config
from tests.sidecar.registry.helpers import by_provider, degraded, ok


def test_wss_endpoints_are_ranked_apart_from_the_rpc_ones() -> None:
    cfg = make_config(
        endpoint("rpc-a"),
        endpoint("wss-synced", kind="node-wss"),
        endpoint("wss-lagging", kind="node-wss"),
        endpoint("wss-down", kind="node-wss"),
        endpoint("wss-other-net", kind="node-wss", network="test"),
    )
    e = by_provider(cfg)
    health = {
        e["rpc-a"].id: ok(best=100, finalized=98),
        e["wss-synced"].id: ok(best=100, finalized=98),
        e["wss-lagging"].id: ok(best=90, finalized=88),
        e["wss-down"].id: degraded(best=100),
    }
    doc = snapshot("finney", cfg.endpoints, health, max_lag=3, now=0.0)
    assert [u["provider"] for u in doc["upstreams"]] == ["rpc-a"]
    ws = [(u["provider"], u["tier"]) for u in doc["ws_upstreams"]]
    assert [p for p, _ in ws] == ["wss-synced", "wss-lagging", "wss-down"]
    assert ws[0][1] < ws[1][1] < ws[2][1]
    assert doc["tip"] == 100  # one tip for both kinds


def test_a_network_without_wss_endpoints_has_an_empty_list() -> None:
    cfg = make_config(endpoint("rpc-a"))
    doc = snapshot("finney", cfg.endpoints, {}, max_lag=3, now=0.0)
    assert doc["ws_upstreams"] == []
