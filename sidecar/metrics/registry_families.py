"""Metric families of the registry and the prober (pure: config and prober in,
families out): endpoint status, latency, heads and lag, per-network healthy
upstreams and lag limit, probes run and probe results by classification."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from common.config import Config
from sidecar.probing.health import chain_heads
from sidecar.probing.prober import Prober
from sidecar.probing.results import NODE_KINDS
from sidecar.registry.routing_snapshot import route

_LABELS = ["endpoint", "provider", "kind", "network"]


def _heads(config: Config, prober: Prober) -> Iterator[Metric]:
    tip = GaugeMetricFamily(
        "chainproxy_chain_tip", "Highest best block of a healthy node", labels=["network"]
    )
    fin = GaugeMetricFamily(
        "chainproxy_chain_finalized", "Highest finalized block", labels=["network"]
    )
    max_lag = GaugeMetricFamily(
        "chainproxy_max_lag_blocks",
        "The network's max_lag_blocks: a node further behind the tip is lagging",
        labels=["network"],
    )
    healthy = GaugeMetricFamily(
        "chainproxy_healthy_upstreams",
        "Node endpoints of the network whose status is OK (0: the proxy has no healthy upstream)",
        labels=["network", "kind"],
    )
    for net, net_config in config.networks.items():
        nodes = [e for e in config.endpoints if e.network == net]
        t, f = chain_heads(nodes, prober.health)
        if t is not None:
            tip.add_metric([net], t)
        if f is not None:
            fin.add_metric([net], f)
        max_lag.add_metric([net], net_config.max_lag_blocks)
        for kind in NODE_KINDS:
            members = [e for e in nodes if e.kind == kind]
            if members:  # a kind the network has no endpoint of is not an outage
                healthy.add_metric(
                    [net, kind], sum(prober.health_of(e.id).healthy for e in members)
                )
    yield from (tip, fin, max_lag, healthy)


def endpoint_families(config: Config, prober: Prober) -> Iterator[Metric]:
    up = GaugeMetricFamily(
        "chainproxy_endpoint_up", "1 when the endpoint's status is OK", labels=_LABELS
    )
    status = GaugeMetricFamily(
        "chainproxy_endpoint_status",
        "Endpoint status (one series per status, value 1 for the current one)",
        labels=[*_LABELS, "status"],
    )
    latency = GaugeMetricFamily(
        "chainproxy_endpoint_latency_ms", "EWMA latency of successful probes", labels=_LABELS
    )
    lag = GaugeMetricFamily(
        "chainproxy_endpoint_lag_blocks", "Blocks behind the network's tip", labels=_LABELS
    )
    best = GaugeMetricFamily(
        "chainproxy_endpoint_best_block", "Best block reported", labels=_LABELS
    )
    fails = GaugeMetricFamily(
        "chainproxy_endpoint_consecutive_failures", "Failed probes in a row", labels=_LABELS
    )
    tips = {
        net: chain_heads([e for e in config.endpoints if e.network == net], prober.health)[0]
        for net in config.networks
    }
    for e in config.endpoints:
        h = prober.health_of(e.id)
        labels = [e.id, e.provider, e.kind, e.network]
        up.add_metric(labels, 1 if h.healthy else 0)
        for s in ("OK", "Degraded", "Unknown"):
            status.add_metric([*labels, s], 1 if h.status == s else 0)
        if h.latency_ms is not None:
            latency.add_metric(labels, h.latency_ms)
        fails.add_metric(labels, h.consecutive_failures)
        if h.best is not None:
            best.add_metric(labels, h.best)
            r = route(e, h, tips[e.network], config.networks[e.network].max_lag_blocks)
            if r.lag is not None:
                lag.add_metric(labels, r.lag)
    yield from (up, status, latency, lag, best, fails)
    yield from _heads(config, prober)
    yield from probe_families(prober)


def probe_families(prober: Prober) -> Iterator[Metric]:
    probes = CounterMetricFamily("chainproxy_probes", "Probes run since start")
    probes.add_metric([], prober.probes_run)
    results = CounterMetricFamily(
        "chainproxy_probe_results",
        "Probe results since start by endpoint, probe kind (full, head) and classification"
        " (live, unknown, dead, timeout, http-5xx, rate-limited, wrong-chain, aborted, ...)",
        labels=["endpoint", "kind", "result"],
    )
    for (eid, kind, result), n in sorted(prober.results.items()):
        results.add_metric([eid, kind, result], n)
    yield from (probes, results)
