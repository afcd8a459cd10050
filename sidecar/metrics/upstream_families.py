"""Metric families of the nodes' capacity (pure): the budgets the config gives
each endpoint (``registry.endpoints[].max_rps``, ``max_concurrency``) and what
the proxies report about their traffic to each node (the ``UPSTREAM_GAUGES``
of ``common.metrics_wire``, accumulated in ``sidecar.metrics.proxy_counters``):
calls sent in the last second, the rate learned from its 429s and how long it
still backs off. Side by side, sent and budget say how close a node runs to
its limit; the waits and back-offs counters are with the proxies' other
counters (``sidecar.metrics.proxy_families``)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from common.config import Config
from sidecar.metrics.proxy_counters import GaugeTotals


def budget_families(config: Config) -> Iterator[Metric]:
    """The configured budgets; an endpoint without one has no series (unlimited)."""
    rps = GaugeMetricFamily(
        "chainproxy_upstream_budget_rps",
        "Calls per second the config allows the proxies to send the endpoint"
        " (registry.endpoints[].max_rps); no series: unlimited",
        labels=["endpoint"],
    )
    concurrency = GaugeMetricFamily(
        "chainproxy_upstream_budget_concurrency",
        "Calls the config allows in flight at the endpoint at once"
        " (registry.endpoints[].max_concurrency); no series: unlimited",
        labels=["endpoint"],
    )
    for e in config.endpoints:
        if e.max_rps is not None:
            rps.add_metric([e.id], e.max_rps)
        if e.max_concurrency is not None:
            concurrency.add_metric([e.id], e.max_concurrency)
    yield from (rps, concurrency)


def upstream_gauge_families(g: GaugeTotals) -> Iterator[Metric]:
    """The proxies' view of each node, over those heard from within 120 s."""
    sent = GaugeMetricFamily(
        "chainproxy_upstream_calls_last_second",
        "Calls the proxies sent the endpoint in the last second, summed",
        labels=["endpoint"],
    )
    for eid, n in sorted(g.upstream_sent_last_s.items()):
        sent.add_metric([eid], n)
    learned = GaugeMetricFamily(
        "chainproxy_upstream_learned_rps",
        "Calls per second the proxies learned the endpoint takes (it answered 429"
        " without a configured max_rps), summed; no series: nothing learned",
        labels=["endpoint"],
    )
    for eid, n in sorted(g.upstream_learned_rps.items()):
        learned.add_metric([eid], n)
    backoff = GaugeMetricFamily(
        "chainproxy_upstream_backoff_seconds",
        "Seconds left until the endpoint gets calls again (it answered 429, or 503 with"
        " Retry-After); the longest any proxy reported; no series: not backing off",
        labels=["endpoint"],
    )
    for eid, left in sorted(g.backoff_left().items()):
        backoff.add_metric([eid], round(left, 3))
    yield from (sent, learned, backoff)
