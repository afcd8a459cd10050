"""The pure part of the usage statistics: validation, labels, percentages, window, summary."""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common import latency_hist
from common.config import Endpoint
from sidecar.jsonfmt import iso
from sidecar.stats import (
    MAX_ROLLUPS,
    WINDOW_S,
    BatchError,
    Counts,
    EndpointInfo,
    Rollup,
    WindowTotals,
    endpoint_labels,
    freshness,
    parse_batch,
    summarize,
    totals_of,
    window_start_minute,
)

NOW = 1_763_700_000.0  # a multiple of 60
MINUTE = int(NOW // 60)
EP_A = "endpoint-srf-" + "a" * 16
EP_B = "endpoint-srf-" + "b" * 16
NETWORKS = ("finney", "test")


def wire_rollup(
    minute: int,
    latencies: Iterable[float],
    *,
    network: str = "finney",
    endpoint: str | None = EP_A,
    method: str = "chain_getHeader",
    errors: int = 0,
    failovers: int = 0,
    cache_hits: int = 0,
) -> dict[str, Any]:
    """A rollup in the agreed wire form, built from individual latencies."""
    hist: latency_hist.Hist = {}
    lat = list(latencies)
    for ms in lat:
        latency_hist.add(hist, ms)
    return {
        "minute": minute,
        "network": network,
        "endpoint": endpoint,
        "method": method,
        "requests": len(lat),
        "errors": errors,
        "failovers": failovers,
        "cache_hits": cache_hits,
        "latency_ms_sum": float(sum(lat)),
        "latency_hist": latency_hist.to_wire(hist),
    }


def wire_batch(rollups: list[dict[str, Any]], batch_id: str | None = None) -> dict[str, Any]:
    return {"batch_id": batch_id or uuid.uuid4().hex, "sent_at": NOW, "rollups": rollups}


def endpoint(eid: str, provider: str, network: str = "finney", archive: bool = False) -> Endpoint:
    return Endpoint(
        url="http://x", provider=provider, kind="node-rpc", network=network, archive=archive, id=eid
    )


# --- validation ----------------------------------------------------------------------------


def test_a_valid_batch_is_parsed() -> None:
    doc = wire_batch([wire_rollup(MINUTE, [100, 200, 300], errors=1, failovers=2)], "AB" * 16)
    doc["extra"] = "ignored"  # unknown keys are allowed: the addon may add fields
    doc["rollups"][0]["extra"] = 1
    b = parse_batch(doc, NETWORKS, NOW)
    assert b.batch_id == "ab" * 16  # normalised to lowercase
    (r,) = b.rollups
    assert (r.minute, r.network, r.endpoint, r.method) == (
        MINUTE,
        "finney",
        EP_A,
        "chain_getHeader",
    )
    assert (r.requests, r.errors, r.failovers, r.cache_hits) == (3, 1, 2, 0)
    assert r.latency_ms_sum == 600.0 and sum(r.hist.values()) == 3
    assert b.records == 3


def test_cache_rollups_have_no_endpoint_and_empty_batches_are_valid() -> None:
    doc = wire_batch([wire_rollup(MINUTE, [1, 2], endpoint=None, cache_hits=2)])
    assert parse_batch(doc, NETWORKS, NOW).rollups[0].endpoint is None
    assert parse_batch(wire_batch([]), NETWORKS, NOW).rollups == ()


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(doc: dict[str, Any]) -> None:
        target: Any = doc
        *parents, last = path.split(".")
        for p in parents:
            target = target[int(p)] if p.isdigit() else target[p]
        if value is _DELETE:
            del target[last]
        else:
            target[last] = value

    return mutate


_DELETE = object()
BAD = [
    ("batch_id", _set("batch_id", "xyz"), "batch_id"),
    ("batch_id missing", _set("batch_id", _DELETE), "batch_id"),
    ("batch_id number", _set("batch_id", 12), "batch_id"),
    ("sent_at missing", _set("sent_at", _DELETE), "sent_at"),
    ("sent_at string", _set("sent_at", "now"), "sent_at"),
    ("sent_at nan", _set("sent_at", float("nan")), "sent_at"),
    ("rollups not a list", _set("rollups", {}), "rollups"),
    ("rollup not object", _set("rollups", [1]), "rollups[0]"),
    ("missing field", _set("rollups.0.method", _DELETE), "rollups[0].method is required"),
    ("missing endpoint", _set("rollups.0.endpoint", _DELETE), "rollups[0].endpoint"),
    ("missing hist", _set("rollups.0.latency_hist", _DELETE), "rollups[0].latency_hist"),
    ("minute float", _set("rollups.0.minute", float(MINUTE)), "rollups[0].minute"),
    ("minute negative", _set("rollups.0.minute", -1), "rollups[0].minute"),
    ("minute bool", _set("rollups.0.minute", True), "rollups[0].minute"),
    ("minute future", _set("rollups.0.minute", MINUTE + 120), "in the future"),
    ("network unknown", _set("rollups.0.network", "mars"), "rollups[0].network"),
    ("network not str", _set("rollups.0.network", 1), "rollups[0].network"),
    ("endpoint shape", _set("rollups.0.endpoint", "https://x"), "rollups[0].endpoint"),
    ("endpoint upper", _set("rollups.0.endpoint", "endpoint-srf-" + "A" * 16), "endpoint"),
    ("method empty", _set("rollups.0.method", ""), "rollups[0].method"),
    ("method control", _set("rollups.0.method", "a\nb"), "rollups[0].method"),
    ("method long", _set("rollups.0.method", "m" * 200), "rollups[0].method"),
    ("requests negative", _set("rollups.0.requests", -3), "rollups[0].requests"),
    ("requests string", _set("rollups.0.requests", "3"), "rollups[0].requests"),
    ("requests float", _set("rollups.0.requests", 3.0), "rollups[0].requests"),
    ("requests huge", _set("rollups.0.requests", 10**15), "rollups[0].requests"),
    ("errors bool", _set("rollups.0.errors", False), "rollups[0].errors"),
    ("errors > requests", _set("rollups.0.errors", 4), "errors (4) > requests (3)"),
    ("failovers > requests", _set("rollups.0.failovers", 4), "failovers (4) > requests"),
    ("cache_hits > requests", _set("rollups.0.cache_hits", 9), "cache_hits (9) > requests"),
    ("failovers negative", _set("rollups.0.failovers", -1), "rollups[0].failovers"),
    ("latency sum negative", _set("rollups.0.latency_ms_sum", -1.0), "latency_ms_sum"),
    ("latency sum inf", _set("rollups.0.latency_ms_sum", float("inf")), "latency_ms_sum"),
    ("latency sum string", _set("rollups.0.latency_ms_sum", "1"), "latency_ms_sum"),
    ("hist not object", _set("rollups.0.latency_hist", [1, 2]), "latency_hist"),
    ("hist bad bucket", _set("rollups.0.latency_hist", {"x": 3}), "bad bucket"),
    ("hist bucket range", _set("rollups.0.latency_hist", {"9999": 3}), "bad bucket"),
    ("hist bucket -2", _set("rollups.0.latency_hist", {"-2": 3}), "bad bucket"),
    ("hist count negative", _set("rollups.0.latency_hist", {"5": -3}), "latency_hist"),
    ("hist count float", _set("rollups.0.latency_hist", {"5": 3.0}), "latency_hist"),
    ("hist total != requests", _set("rollups.0.latency_hist", {"5": 2}), "holds 2 latencies"),
]


@pytest.mark.parametrize(("name", "mutate", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_batches_are_refused_naming_the_problem(
    name: str, mutate: Callable[[dict[str, Any]], None], message: str
) -> None:
    doc = wire_batch([wire_rollup(MINUTE, [10, 20, 30])])
    parse_batch(doc, NETWORKS, NOW)  # valid before the mutation
    mutate(doc)
    with pytest.raises(BatchError, match=re.escape(message)):
        parse_batch(doc, NETWORKS, NOW)


def test_the_body_must_be_an_object_and_the_rollup_count_is_bounded() -> None:
    with pytest.raises(BatchError, match="JSON object"):
        parse_batch([], NETWORKS, NOW)
    rollups = [wire_rollup(MINUTE, [5])] * (MAX_ROLLUPS + 1)
    with pytest.raises(BatchError, match="too many rollups"):
        parse_batch(wire_batch(rollups), NETWORKS, NOW)
    assert len(parse_batch(wire_batch(rollups[:-1]), NETWORKS, NOW).rollups) == MAX_ROLLUPS


def test_a_bad_rollup_anywhere_is_named_by_its_index() -> None:
    rollups = [wire_rollup(MINUTE, [5]) for _ in range(5)]
    rollups[3]["errors"] = 7
    with pytest.raises(BatchError, match=r"rollups\[3\]\.errors"):
        parse_batch(wire_batch(rollups), NETWORKS, NOW)


def test_a_small_clock_skew_is_tolerated() -> None:
    doc = wire_batch([wire_rollup(MINUTE + 30, [5])])  # 30 min ahead of the sidecar
    assert parse_batch(doc, NETWORKS, NOW).rollups[0].minute == MINUTE + 30


# --- labels, window -----------------------------------------------------------------------


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


def test_window_start_minute_and_cut_off() -> None:
    assert window_start_minute(NOW) == MINUTE - WINDOW_S // 60
    assert window_start_minute(NOW + 59) == MINUTE - WINDOW_S // 60
    assert window_start_minute(NOW + 60) == MINUTE - WINDOW_S // 60 + 1
    first = window_start_minute(NOW)
    rollups = [
        Rollup(first - 1, "finney", EP_A, "m", 1, hist={10: 1}),
        Rollup(first, "finney", EP_A, "m", 2, hist={10: 2}),
        Rollup(MINUTE, "test", None, "m", 4, cache_hits=4, hist={0: 4}),
    ]
    t = totals_of(rollups, NOW)
    assert t.counts[("finney", EP_A)].requests == 2
    assert t.counts[("test", "")].cache_hits == 4
    assert ("finney", EP_A) not in totals_of(rollups, NOW + 60).counts


def test_window_totals_subtract_and_copy() -> None:
    t = WindowTotals()
    t.add_counts("finney", EP_A, Counts(5, 1, 1, 0, 50.0))
    t.add_hist("finney", {10: 3, 20: 2})
    copy = t.copy()
    leaving = WindowTotals()
    leaving.add_counts("finney", EP_A, Counts(5, 1, 1, 0, 50.0))
    leaving.add_hist("finney", {10: 3, 20: 1})
    t.subtract(leaving)
    assert t.counts == {} and t.hists == {"finney": {20: 1}}
    assert copy.counts[("finney", EP_A)].requests == 5  # the copy is independent


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
