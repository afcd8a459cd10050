"""Validation of the ``metrics`` section of a usage batch (common.metrics_wire)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from common.metrics_wire import MAX_ROWS
from common.usage_wire import BatchError
from sidecar.metrics.batch_section import Gauges, parse_metrics
from sidecar.usage.stats.batch import parse_batch
from tests.sidecar.metrics_batch import batch_with_metrics, metrics_section
from tests.sidecar.usage.stats.helpers import EP_A, EP_B, NETWORKS, NOW

SECTION = metrics_section([EP_A, EP_B])


def test_a_realistic_section_is_parsed_into_tuples() -> None:
    m = parse_metrics(SECTION, NETWORKS)
    assert m.proxy_id == "proxy-host:4242"
    assert ("finney", "chain_getHeader", "ok", 10) in m.requests
    ((net, buckets, total),) = m.duration
    assert net == "finney" and sum(buckets) == 17 and total == pytest.approx(24.7)
    assert (EP_A, "soft:state-discarded", 1) in m.attempts
    assert m.failovers == (("finney", 1),)
    assert ("chainproxy_redis_fallbacks_total", (("store", "ratelimit"),), 2) in m.extra
    assert m.gauges == Gauges(
        2, 3, (("chain_subscribeNewHeads", 3),), (("chain_subscribeNewHeads", 1),)
    )


def test_the_per_node_gauges_are_parsed_by_endpoint_id() -> None:
    gauges = {
        "upstream_sent_last_s": {EP_A: 17, EP_B: 0},
        "upstream_learned_rps": {EP_B: 12},
        "upstream_backoff_s": {EP_B: 30},
    }
    m = parse_metrics({"proxy_id": "h:1", "gauges": gauges}, NETWORKS)
    assert m.gauges is not None
    assert m.gauges.upstream_sent_last_s == ((EP_A, 17), (EP_B, 0))
    assert m.gauges.upstream_learned_rps == ((EP_B, 12),)
    assert m.gauges.upstream_backoff_s == ((EP_B, 30),)
    older = parse_metrics({"proxy_id": "h:1", "gauges": {"ws_connections": 1}}, NETWORKS)
    assert older.gauges is not None and older.gauges.upstream_backoff_s == ()  # absent: none


def test_every_key_but_the_proxy_id_is_optional() -> None:
    m = parse_metrics({"proxy_id": "h:1"}, NETWORKS)
    assert (m.requests, m.duration, m.attempts, m.failovers, m.extra) == ((), (), (), (), ())
    assert m.gauges is None  # no snapshot: the proxy's gauges are left as they were
    assert parse_metrics({"proxy_id": "h:1", "gauges": {}}, NETWORKS).gauges == Gauges()


def test_a_heartbeat_is_an_empty_batch_with_metrics() -> None:
    b = parse_batch(
        batch_with_metrics({"proxy_id": "h:1", "gauges": {}}, sent_at=NOW), NETWORKS, NOW
    )
    assert b.rollups == () and b.metrics is not None and b.metrics.proxy_id == "h:1"
    assert parse_batch(batch_with_metrics(SECTION, sent_at=NOW), NETWORKS, NOW).metrics is not None
    plain = batch_with_metrics(SECTION, sent_at=NOW)
    del plain["metrics"]
    assert parse_batch(plain, NETWORKS, NOW).metrics is None  # today's batches still work


def _at(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(doc: dict[str, Any]) -> None:
        target: Any = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


def _drop(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda doc: doc.pop(key)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (_drop("proxy_id"), "proxy_id must be a printable string"),
        (_at(("proxy_id",), "x" * 129), "proxy_id must be a printable string"),
        (_at(("requests",), {}), "metrics.requests must be a list"),
        (_at(("requests", 0), ["finney", "m", "ok"]), r"metrics.requests\[0\] must be a list of 4"),
        (_at(("requests", 0, 0), 7), "not a configured network"),
        (_at(("requests", 0, 1), ""), "method must be a printable string"),
        (_at(("requests", 0, 1), "bad\nname"), "method must be a printable string"),
        (_at(("requests", 0, 2), "teapot"), "outcome 'teapot' is not one of ok, cache_hit"),
        (_at(("requests", 0, 3), -1), r"metrics.requests\[0\] count must be an integer"),
        (_at(("requests", 0, 3), 1.5), "count must be an integer"),
        (_at(("requests", 0, 3), True), "count must be an integer"),
        (_at(("duration", 0, 1), [1, 2]), "bucket counts must be a list of 12"),
        (_at(("duration", 0, 2), float("nan")), "sum_seconds must be a finite number"),
        (_at(("duration", 0, 2), "1"), "sum_seconds must be a number"),
        (_at(("attempts", 0, 0), "https://node"), "endpoint must be an id endpoint-srf-"),
        (_at(("attempts", 0, 1), None), "result must be a printable string"),
        (_at(("failovers", 0, 0), ["finney"]), "not a configured network"),
        (_at(("extra", 0, 0), "chainproxy_made_up_total"), "is not one of chainproxy_coalesced"),
        (_at(("extra", 0, 1), {"__name__": "x"}), "not a Prometheus label name"),
        (_at(("extra", 0, 1), {"a-b": "x"}), "not a Prometheus label name"),
        (_at(("extra", 0, 1), {f"l{i}": "x" for i in range(5)}), "at most 4 labels"),
        (_at(("extra", 0, 1), {"network": 3}), "label network must be a printable string"),
        (_at(("gauges",), []), "metrics.gauges must be an object"),
        (_at(("gauges", "ws_connections"), -2), r"metrics.gauges.ws_connections must be"),
        (_at(("gauges", "client_subscriptions"), []), "client_subscriptions must be an object"),
        (_at(("gauges", "upstream_subscriptions", "m"), "1"), "upstream_subscriptions"),
        (_at(("gauges", "upstream_sent_last_s"), [[EP_A, 1]]), "upstream_sent_last_s must be an"),
        (
            _at(("gauges", "upstream_sent_last_s"), {"https://node": 1}),
            "must be an id endpoint-srf",
        ),
        (_at(("gauges", "upstream_learned_rps"), {EP_A.upper(): 1}), "must be an id endpoint-srf"),
        (_at(("gauges", "upstream_learned_rps"), {EP_A: 2.5}), r"learned_rps\['endpoint-srf"),
        (_at(("gauges", "upstream_backoff_s"), {EP_A: -1}), "upstream_backoff_s"),
        (_at(("gauges", "upstream_backoff_s"), {EP_A: None}), "must be an integer"),
        (
            _at(
                ("gauges", "upstream_backoff_s"),
                {f"endpoint-srf-{i:016x}": 1 for i in range(MAX_ROWS + 1)},
            ),
            "at most 10000",
        ),
    ],
)
def test_a_broken_section_refuses_the_whole_batch(
    mutate: Callable[[dict[str, Any]], None], message: str
) -> None:
    section = copy.deepcopy(SECTION)
    mutate(section)
    with pytest.raises(BatchError, match=message):
        parse_batch(batch_with_metrics(section, sent_at=NOW), NETWORKS, NOW)


def test_metrics_must_be_an_object_and_rows_are_bounded() -> None:
    with pytest.raises(BatchError, match="metrics must be an object"):
        parse_batch(batch_with_metrics([], sent_at=NOW), NETWORKS, NOW)  # type: ignore[arg-type]
    too_many = {"proxy_id": "h:1", "failovers": [["finney", 1]] * (MAX_ROWS + 1)}
    with pytest.raises(BatchError, match="too many rows"):
        parse_metrics(too_many, NETWORKS)
