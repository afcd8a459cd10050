"""The usage summary: endpoint labels, freshness and the ``GET /api/v1/usage`` document."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from common import latency_hist
from common.config import Endpoint
from common.usage_wire import Rollup
from sidecar.jsonfmt import iso
from sidecar.usage.stats.summary import EndpointInfo, endpoint_labels, freshness, summarize
from sidecar.usage.stats.window import totals_of
from tests.sidecar.usage.stats.helpers import EP_A, EP_B, MINUTE, NETWORKS, NOW, endpoint

# --- labels, freshness ---------------------------------------------------------------------


def test_labels_use_network_or_archive_role() -> None:
    labels = endpoint_labels(
        [
            EndpointInfo(EP_A, "opentensor", "finney"),
            EndpointInfo(EP_B, "opentensor", "finney", archive=True),
            EndpointInfo("endpoint-srf-" + "c" * 16, "onfinality", "test"),
        ]
    )
    assert labels == {
        EP_A: "opentensor-finney-rpc",
        EP_B: "opentensor-archive-rpc",
        "endpoint-srf-" + "c" * 16: "onfinality-test-rpc",
    }


def test_label_suffixes_follow_id_order_whatever_the_input_order() -> None:
    ids = ["endpoint-srf-" + c * 16 for c in "3a1f"]
    infos = [EndpointInfo(i, "p", "finney") for i in ids]
    expected = {
        "endpoint-srf-" + "1" * 16: "p-finney-rpc",
        "endpoint-srf-" + "3" * 16: "p-finney-rpc-2",
        "endpoint-srf-" + "a" * 16: "p-finney-rpc-3",
        "endpoint-srf-" + "f" * 16: "p-finney-rpc-4",
    }
    assert endpoint_labels(infos) == expected
    assert endpoint_labels(reversed(infos)) == expected


def test_labels_stay_unique_when_a_provider_name_mimics_a_suffix() -> None:
    infos = [
        EndpointInfo("endpoint-srf-" + "1" * 16, "p", "finney"),
        EndpointInfo("endpoint-srf-" + "2" * 16, "p", "finney"),
        EndpointInfo("endpoint-srf-" + "0" * 16, "p-finney-rpc", "2"),  # -> "p-finney-rpc-2-rpc"
    ]
    labels = endpoint_labels(infos)
    assert len(set(labels.values())) == 3


def test_a_wss_endpoints_traffic_never_renames_its_nodes_rpc_endpoint() -> None:
    """A node's node-wss endpoint (an id that sorts first) took the plain
    ``-rpc`` label once it had traffic, and its node-rpc became ``-rpc-2``:
    labels come from the whole config, and a wss endpoint's ends ``-wss``."""
    wss = Endpoint(
        url="ws://x",
        provider="sim",
        kind="node-wss",
        network="finney",
        id="endpoint-srf-" + "0" * 16,
    )
    endpoints = [endpoint(EP_A, "sim"), wss]
    rpc_only = [Rollup(MINUTE, "finney", EP_A, "m", 2, 0, 0, 0, 20.0, {10: 2})]
    both = [*rpc_only, Rollup(MINUTE, "finney", wss.id, "m", 1, 0, 0, 0, 10.0, {10: 1})]
    before = {r["id"]: r["endpoint"] for r in _summary(rpc_only, endpoints=endpoints)["endpoints"]}
    after = {r["id"]: r["endpoint"] for r in _summary(both, endpoints=endpoints)["endpoints"]}
    assert before == {EP_A: "sim-finney-rpc"}
    assert after == {EP_A: "sim-finney-rpc", wss.id: "sim-finney-wss"}


def test_freshness() -> None:
    assert freshness(None, NOW) == "unknown"
    assert freshness(NOW - 600, NOW) == "fresh"
    assert freshness(NOW - 601, NOW) == "unknown"


# --- the summary ---------------------------------------------------------------------------


def _summary(rollups: list[Rollup], **kw: Any) -> dict[str, Any]:
    return summarize(
        totals_of(rollups, NOW),
        networks=NETWORKS,
        endpoints=kw.pop("endpoints", [endpoint(EP_A, "opentensor"), endpoint(EP_B, "other")]),
        updated=kw.pop("updated", None),
        now=NOW,
        **kw,
    )


def test_empty_summary_has_the_contract_shape() -> None:
    s = _summary([])
    assert s == {
        "window_s": 604800,
        "requests": 0,
        "p50_ms": None,
        "p95_ms": None,
        "success": {"count": 0, "pct": 0.0},
        "errors": {"count": 0, "pct": 0.0},
        "failover": {"count": 0, "pct": 0.0},
        "cache_hits": {"count": 0, "pct": 0.0},
        "by_network": {"finney": 0, "test": 0},
        "endpoints": [],
        "methods": [],
        "updated": None,
        "freshness": "unknown",
    }


def test_summary_counts_percentages_and_endpoint_rows() -> None:
    rollups = [
        Rollup(MINUTE, "finney", EP_A, "m", 6, 3, 1, 0, 600.0, {250: 6}),
        Rollup(MINUTE, "finney", EP_B, "m", 2, 0, 0, 0, 101.0, {200: 2}),
        Rollup(MINUTE, "finney", None, "m", 2, 0, 0, 2, 2.0, {0: 2}),
        Rollup(MINUTE, "test", "endpoint-srf-" + "9" * 16, "m", 10, 1, 0, 0, 50.0, {80: 10}),
    ]
    s = _summary(rollups, updated=NOW - 30)
    assert s["requests"] == 20
    assert s["success"] == {"count": 16, "pct": 80.0}
    assert s["errors"] == {"count": 4, "pct": 20.0}
    assert s["failover"] == {"count": 1, "pct": 5.0}
    assert s["cache_hits"] == {"count": 2, "pct": 10.0}
    assert s["by_network"] == {"finney": 10, "test": 10}
    assert s["updated"] == iso(NOW - 30) and s["freshness"] == "fresh"
    assert s["endpoints"] == [
        {
            "endpoint": "unknown-test-rpc",
            "id": "endpoint-srf-" + "9" * 16,
            "provider": "unknown",
            "requests": 10,
            "share_pct": 55.56,
            "errors_pct": 10.0,
            "avg_latency_ms": 5,
        },
        {
            "endpoint": "opentensor-finney-rpc",
            "id": EP_A,
            "provider": "opentensor",
            "requests": 6,
            "share_pct": 33.33,
            "errors_pct": 50.0,
            "avg_latency_ms": 100,
        },
        {
            "endpoint": "other-finney-rpc",
            "id": EP_B,
            "provider": "other",
            "requests": 2,
            "share_pct": 11.11,
            "errors_pct": 0.0,
            "avg_latency_ms": 50,  # 50.5 rounds to even
        },
    ]
    assert s["p50_ms"] == round(latency_hist.value_of(80))
    assert s["p95_ms"] == round(latency_hist.value_of(250))


def test_network_filter_narrows_everything_but_by_network() -> None:
    rollups = [
        Rollup(MINUTE, "finney", EP_A, "m", 6, 3, 0, 0, 600.0, {250: 6}),
        Rollup(MINUTE, "test", EP_B, "m", 4, 0, 0, 0, 40.0, {100: 4}),
    ]
    s = _summary(rollups, network="test")
    assert s["requests"] == 4 and s["errors"]["count"] == 0
    assert s["by_network"] == {"finney": 6, "test": 4}
    assert [r["id"] for r in s["endpoints"]] == [EP_B]
    assert s["endpoints"][0]["share_pct"] == 100.0
    assert s["p50_ms"] == round(latency_hist.value_of(100))


def test_rows_with_equal_requests_are_ordered_by_label() -> None:
    eps = [endpoint(EP_A, "zeta"), endpoint(EP_B, "alpha")]
    rollups = [
        Rollup(MINUTE, "finney", EP_A, "m", 3, hist={10: 3}),
        Rollup(MINUTE, "finney", EP_B, "m", 3, hist={10: 3}),
    ]
    s = _summary(rollups, endpoints=eps)
    assert [r["endpoint"] for r in s["endpoints"]] == ["alpha-finney-rpc", "zeta-finney-rpc"]


def test_labels_count_configured_endpoints_without_traffic() -> None:
    """A label does not change when another endpoint of the provider gets traffic."""
    first, second = sorted([EP_A, EP_B])
    eps = [endpoint(first, "p"), endpoint(second, "p")]
    rollups = [Rollup(MINUTE, "finney", second, "m", 1, hist={10: 1})]
    assert _summary(rollups, endpoints=eps)["endpoints"][0]["endpoint"] == "p-finney-rpc-2"


def test_a_network_removed_from_the_config_is_not_counted() -> None:
    rollups = [Rollup(MINUTE, "old", EP_A, "m", 5, hist={10: 5})]
    s = _summary(rollups)
    assert s["requests"] == 0 and s["by_network"] == {"finney": 0, "test": 0}


@given(
    st.lists(
        st.tuples(
            st.sampled_from(NETWORKS), st.sampled_from([EP_A, EP_B, None]), st.integers(1, 50)
        ),
        max_size=20,
    )
)
def test_totals_add_up(items: list[tuple[str, str | None, int]]) -> None:
    rollups = [
        Rollup(MINUTE, net, ep, "m", n, n // 3, n // 4, n if ep is None else 0, n * 10.0, {5: n})
        for net, ep, n in items
    ]
    s = _summary(rollups)
    total = sum(n for _, _, n in items)
    assert s["requests"] == total == sum(s["by_network"].values())
    assert s["success"]["count"] + s["errors"]["count"] == total
    assert sum(r["requests"] for r in s["endpoints"]) + s["cache_hits"]["count"] == total
    if s["endpoints"]:
        assert math.isclose(sum(r["share_pct"] for r in s["endpoints"]), 100, abs_tol=0.05)
    for key in ("success", "errors", "failover", "cache_hits"):
        assert 0 <= s[key]["pct"] <= 100
