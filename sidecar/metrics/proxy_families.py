"""Metric families of the proxies (pure: the usage intake's counters in,
families out): the live metrics of the batches' ``metrics`` section
(``common.metrics_wire``, accumulated in ``sidecar.metrics.proxy_counters``), the
per-network counts of the usage rollups, batch intake and the statistics'
``updated`` time. The intake is read through ``UsageIntake``, which
``sidecar.usage.service.UsageService`` is: this package imports nothing of
``sidecar.usage`` (the usage service feeds ``proxy_counters``, not the other
way round)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from common.metrics_wire import EXTRA_COUNTERS, REFUSAL_POLICIES
from sidecar.metrics.proxy_counters import CAPPED, Counters, GaugeTotals, ProxyCounters
from sidecar.metrics.upstream_families import upstream_gauge_families

REFUSALS = "chainproxy_refusals_total"

_EXTRA_HELP = {
    "chainproxy_coalesced_total": "Calls answered by sharing an identical call already in flight",
    "chainproxy_upstream_batches_total": (
        "Upstream JSON-RPC batches the proxy made of a client's single reads sent in one loop turn"
    ),
    "chainproxy_upstream_batched_calls_total": "Calls sent upstream inside those batches",
    "chainproxy_hedged_total": "Hedged (second, parallel) upstream attempts",
    "chainproxy_redis_fallbacks_total": "Times Redis was down or slow and a local store served",
    "chainproxy_subscription_moves_total": "Upstream subscriptions moved to another node",
    "chainproxy_quota_units_total": "Quota units charged, by method (state_call by its priced"
    " runtime API) and tier",
    "chainproxy_refusals_total": "Calls and handshakes refused, by the policy that refused them"
    " (allowlist, rate_limit, api_key, max_connections, max_subscriptions, max_follows,"
    " subscriptions, request, upstream_capacity, state_unavailable)",
    "chainproxy_upstream_waits_total": "Calls that waited for a node's budget"
    " (max_rps, max_concurrency, a learned rate) before being sent or shed, by network",
    "chainproxy_access_log_dropped_total": "Access log lines dropped (the writer behind, or"
    " the disk full); calls are never dropped for it",
    "chainproxy_usage_dropped_total": "Calls whose usage records a proxy dropped, by reason"
    " (spool_full: past proxy.usage.spool_max_batches while the sidecar was away;"
    " memory_full: past the memory bound while the spool could not be written)",
    "chainproxy_cross_checks_total": "Finalized answers checked against a second node, by"
    " network and outcome (agree, mismatch, quarantined, readmitted, unresolved, skipped)",
    "chainproxy_finality_lookups_total": "Look-ups of whether a block hash a client read at is"
    " a finalized block, by network and outcome (final, not-final, unknown: no node told,"
    " skipped: too many in flight)",
    "chainproxy_cache_purged_total": "Cache entries removed because the node that answered"
    " them was quarantined by a cross-check, by network and tier (local, shared)",
    "chainproxy_cache_errors_total": "Edge cache operations on disk that failed (a full or"
    " slow disk, a lock, a corrupt entry), by op (open, read, write, decode, delete, purge,"
    " close); each is a miss for the call, never an error",
    "chainproxy_prewarm_total": "Reads fetched ahead at a new block by the pre-warm, by network"
    " and outcome (fetched, used by a client, wasted: no client came, skipped)",
    "chainproxy_ws_messages_total": "WebSocket client messages, by who read them (direct: "
    "chainproxy itself; mitmproxy: its WebSocket layer), counted when the socket ends",
    "chainproxy_http_direct_requests_total": "HTTP calls read and answered by chainproxy itself"
    " on a kept-alive connection (chainproxy_http_direct), by network; the rest went through"
    " mitmproxy's HTTP layer",
    "chainproxy_pin_fallbacks_total": "Reads the proxy pinned to a head no node knew"
    " (reorged away, not imported yet), sent again unpinned, by network",
    "chainproxy_follow_operations_total": "chainHead_v1 operations (body, call, storage) by"
    " network, kind and outcome (done, inaccessible, error, limit_reached)",
    "chainproxy_follow_stops_total": "chainHead_v1 follows chainproxy stopped, by network and"
    " reason (pinned_blocks, no_head, view_rebuilt)",
    "chainproxy_upstream_silent_total": "Times a node's subscription socket went silent"
    " (no head pushed while its network advanced; its subscriptions moved), by endpoint",
    "chainproxy_upstream_backoffs_total": "Times a node started or extended a back-off, by"
    " endpoint and reason (rate-limited: 429 or a JSON-RPC rate-limit error; work-limited:"
    " a JSON-RPC error saying the node's work limit; overloaded: 503 with Retry-After)",
}


def live_counter_families(c: Counters, networks: Sequence[str] = ()) -> Iterator[Metric]:
    """The contract counters (deploy/README.md#metric-names), as the proxies reported
    them; the failovers of each served network and the refusals of each policy at 0
    before their first (an alert's rate() has a series to read, not "no data")."""
    requests = CounterMetricFamily(
        "chainproxy_requests",
        "Calls by network, method (off-allowlist methods: other) and outcome"
        " (ok, cache_hit, error, refused, rate_limited)",
        labels=["network", "method", "outcome"],
    )
    for key, n in sorted(c.requests.items()):
        requests.add_metric(list(key), n)
    duration = HistogramMetricFamily(
        "chainproxy_request_duration_seconds",
        "Time from the call's arrival to its answer, by network",
        labels=["network"],
    )
    for net, h in sorted(c.duration.items()):
        duration.add_metric([net], h.cumulative(), h.sum)
    attempts = CounterMetricFamily(
        "chainproxy_upstream_attempts",
        "Attempts at upstream endpoints by result (ok, timeout, connect-error, http-5xx,"
        " bad-body, soft:<reason>, ...)",
        labels=["endpoint", "result"],
    )
    for attempt, n in sorted(c.attempts.items()):
        attempts.add_metric(list(attempt), n)
    failovers = CounterMetricFamily(
        "chainproxy_failovers", "Calls that failed over to another upstream", labels=["network"]
    )
    for net, n in sorted({**dict.fromkeys(networks, 0), **c.failovers}.items()):
        failovers.add_metric([net], n)
    yield from (requests, duration, attempts, failovers)
    for name in EXTRA_COUNTERS:
        # Label names are the proxy's choice (common.metrics_wire), so samples are
        # added one by one rather than through a family with fixed label names.
        family = Metric(name.removesuffix("_total"), _EXTRA_HELP[name], "counter")
        rows = c.extra.get(name, {})
        if name == REFUSALS:
            rows = {**{(("policy", p),): 0 for p in REFUSAL_POLICIES}, **rows}
        for labels, n in sorted(rows.items()):
            family.add_sample(name, dict(labels), n)
        yield family
    dropped = CounterMetricFamily(
        "chainproxy_proxy_metrics_dropped",
        "Rows of the proxies' metrics dropped because a metric reached its cap of label sets",
        labels=["metric"],
    )
    for metric in CAPPED:  # zeros too: rate() needs the series before the first drop
        dropped.add_metric([metric], c.dropped.get(metric, 0))
    yield dropped


def _gauge(name: str, help_: str, value: float) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, help_)
    g.add_metric([], value)
    return g


def live_gauge_families(g: GaugeTotals) -> Iterator[Metric]:
    yield _gauge(
        "chainproxy_proxies_reporting",
        "Proxy processes whose last usage batch or heartbeat arrived within 120 s",
        g.proxies,
    )
    yield _gauge(
        "chainproxy_websocket_connections",
        "Open client WebSocket connections, summed over the reporting proxies",
        g.ws_connections,
    )
    yield _gauge(
        "chainproxy_spool_batches",
        "Usage batches waiting in the proxies' on-disk spools (per machine), summed",
        g.spool_batches,
    )
    for name, help_, by_method in (
        ("chainproxy_client_subscriptions", "Client subscriptions", g.client_subscriptions),
        (
            "chainproxy_upstream_subscriptions",
            "Subscriptions held at upstream nodes (shared by the clients)",
            g.upstream_subscriptions,
        ),
    ):
        family = GaugeMetricFamily(name, f"{help_} by method, summed", labels=["method"])
        for method, n in sorted(by_method.items()):
            family.add_metric([method], n)
        yield family
    off = GaugeMetricFamily(
        "chainproxy_mechanism_off",
        "Proxies running without this mechanism: an untested mitmproxy or wsproto accepted"
        " with chainproxy_allow_untested (header_bound, slow_request_deadline, json_413,"
        " ws_message_bound, leaked_socket_fix, idle_closing: security bounds; the rest speed)",
        labels=["mechanism"],
    )
    for mechanism, n in sorted(g.mechanisms_off.items()):
        off.add_metric([mechanism], n)
    yield off
    pinned = GaugeMetricFamily(
        "chainproxy_follow_pinned_blocks",
        "Blocks held pinned by the chainHead_v1 follows, by network, summed",
        labels=["network"],
    )
    for network, n in sorted(g.follow_pinned_blocks.items()):
        pinned.add_metric([network], n)
    yield pinned
    yield from upstream_gauge_families(g)


class UsageIntake(Protocol):
    """What the families read of the usage intake (``UsageService``);
    ``counted``: network -> [requests, errors, failovers, cache hits]."""

    @property
    def counted(self) -> Mapping[str, list[int]]: ...
    @property
    def batches_accepted(self) -> int: ...
    @property
    def batches_duplicate(self) -> int: ...
    @property
    def batches_rejected(self) -> int: ...
    @property
    def batches_failed(self) -> int: ...
    @property
    def calls_left_out(self) -> int: ...
    @property
    def store_errors(self) -> int: ...
    @property
    def updated(self) -> float | None: ...
    @property
    def proxy_metrics(self) -> ProxyCounters: ...


def usage_families(usage: UsageIntake, networks: Sequence[str]) -> Iterator[Metric]:
    """The rollups' per-network counts, batch intake and the statistics' freshness."""
    counted = usage.counted
    names = ("requests", "errors", "failovers", "cache_hits")
    helps = (
        "Proxied calls",
        "Calls answered with an error",
        "Calls that failed over",
        "Calls answered from the edge cache",
    )
    for i, (name, help_) in enumerate(zip(names, helps, strict=True)):
        c = CounterMetricFamily(
            f"chainproxy_proxy_{name}",
            f"{help_} (from the addon's usage batches, since sidecar start)",
            labels=["network"],
        )
        for net in networks:
            c.add_metric([net], counted.get(net, [0, 0, 0, 0])[i])
        yield c
    batches = CounterMetricFamily(
        "chainproxy_usage_batches", "Usage batches received", labels=["result"]
    )
    for result, n in (
        ("accepted", usage.batches_accepted),
        ("duplicate", usage.batches_duplicate),
        ("rejected", usage.batches_rejected),
        ("failed", usage.batches_failed),
    ):
        batches.add_metric([result], n)
    yield batches
    left_out = CounterMetricFamily(
        "chainproxy_usage_calls_left_out",
        "Calls in usage batches of networks this sidecar does not serve, left out",
    )
    left_out.add_metric([], usage.calls_left_out)
    yield left_out
    errors = CounterMetricFamily("chainproxy_usage_store_errors", "Usage store errors")
    errors.add_metric([], usage.store_errors)
    yield errors
    yield _gauge(
        "chainproxy_stats_updated_timestamp_seconds",
        "Unix time the usage statistics last took a batch (a heartbeat counts); 0: never"
        " (the API's freshness is unknown past 600 s)",
        usage.updated or 0.0,
    )
    yield from live_counter_families(usage.proxy_metrics.counters(), networks)
    yield from live_gauge_families(usage.proxy_metrics.gauges())
