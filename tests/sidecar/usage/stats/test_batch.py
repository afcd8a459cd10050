"""Validation of the addon's usage batches (the wire form)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from common.usage_wire import MAX_ROLLUPS, BatchError
from sidecar.usage.stats.batch import parse_batch
from tests.sidecar.usage.stats.helpers import EP_A, MINUTE, NETWORKS, NOW, wire_batch, wire_rollup


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


def test_the_records_of_a_network_no_longer_served_are_left_out() -> None:
    """A reload took ``test`` out while a proxy still held its records: the
    batch's other records are taken (refused whole, its proxy would drop them
    all), and so are its live metrics but for those rows."""
    doc = wire_batch(
        [
            wire_rollup(MINUTE, [1, 2], network="finney"),
            wire_rollup(MINUTE, [3], network="test"),
            wire_rollup(MINUTE, [4, 5, 6], network="finney", method="state_call"),
        ]
    )
    doc["metrics"] = {
        "proxy_id": "p1",
        "requests": [["test", "system_health", "ok", 2], ["finney", "system_health", "ok", 5]],
        "failovers": [["test", 1], ["finney", 2]],
    }
    b = parse_batch(doc, ("finney",), NOW)
    assert [(r.network, r.method, r.requests) for r in b.rollups] == [
        ("finney", "chain_getHeader", 2),
        ("finney", "state_call", 3),
    ]
    assert (b.left_out, b.left_out_calls) == (("test",), 1)  # said and counted, not silent
    assert b.metrics is not None
    assert b.metrics.requests == (("finney", "system_health", "ok", 5),)
    assert b.metrics.failovers == (("finney", 2),)
    with pytest.raises(BatchError, match=r"rollups\[0\]\.network"):
        parse_batch(wire_batch([wire_rollup(MINUTE, [1], network=7)]), NETWORKS, NOW)  # type: ignore[arg-type]


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
