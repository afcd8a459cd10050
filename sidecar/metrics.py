"""Prometheus metrics at ``/metrics`` (prometheus-client).

A custom collector reads the live state at scrape time (no metric objects to
keep in sync, nothing global): endpoint status and probe latency, chain heads
and lag, probes run, incidents, proxy usage counters (from the usage batches
the addon delivers) and the depth of the addon's on-disk usage spool. It is
given callables rather than the app, so this module knows nothing of the
app's keys (``sidecar.app`` wires it, ``sidecar.ops_api`` serves it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import diskcache
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from common.config import Config
from sidecar.prober import Prober
from sidecar.routing import chain_heads, route
from sidecar.usage_service import UsageService

log = logging.getLogger("chainproxy.sidecar.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LABELS = ["endpoint", "provider", "kind", "network"]


class SidecarCollector(Collector):
    def __init__(
        self,
        config: Config,
        prober: Callable[[], Prober | None],
        usage: Callable[[], UsageService | None],
        open_incidents: Callable[[], int | None] = lambda: None,
    ) -> None:
        self.config = config
        self._prober = prober
        self._usage = usage
        self._open_incidents = open_incidents
        self._spool: diskcache.Index | None = None

    def _spool_depth(self) -> int | None:
        path: Path = self.config.data_dir / "spool"
        if not path.exists():
            return 0
        try:
            if self._spool is None:
                self._spool = diskcache.Index(str(path))
            return len(self._spool)
        except Exception as e:  # a metric must never break the scrape
            log.warning("cannot read the usage spool at %s: %s", path, e)
            return None

    def collect(self) -> Iterator[Metric]:
        prober = self._prober()
        if prober is not None:
            yield from self._endpoints(prober)
        usage = self._usage()
        if usage is not None:
            yield from self._usage_metrics(usage)
        depth = self._spool_depth()
        if depth is not None:
            g = GaugeMetricFamily(
                "chainproxy_usage_spool_batches", "Usage batches waiting in the addon's spool"
            )
            g.add_metric([], depth)
            yield g
        incidents = self._open_incidents()
        if incidents is not None:
            g = GaugeMetricFamily("chainproxy_incidents_open", "Incidents currently ongoing")
            g.add_metric([], incidents)
            yield g

    def _endpoints(self, prober: Prober) -> Iterator[Metric]:
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
        tip = GaugeMetricFamily(
            "chainproxy_chain_tip", "Highest best block of a healthy node", labels=["network"]
        )
        fin = GaugeMetricFamily(
            "chainproxy_chain_finalized", "Highest finalized block", labels=["network"]
        )
        heads = {}
        for net in self.config.networks:
            nodes = [e for e in self.config.endpoints if e.network == net]
            heads[net] = chain_heads(nodes, prober.health)
            t, f = heads[net]
            if t is not None:
                tip.add_metric([net], t)
            if f is not None:
                fin.add_metric([net], f)
        for e in self.config.endpoints:
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
                r = route(e, h, heads[e.network][0], self.config.networks[e.network].max_lag_blocks)
                if r.lag is not None:
                    lag.add_metric(labels, r.lag)
        probes = CounterMetricFamily("chainproxy_probes", "Probes run since start")
        probes.add_metric([], prober.probes_run)
        yield from (up, status, latency, lag, best, fails, tip, fin, probes)

    def _usage_metrics(self, usage: UsageService) -> Iterator[Metric]:
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
            for net in self.config.proxy.networks:
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
        errors = CounterMetricFamily("chainproxy_usage_store_errors", "Usage store errors")
        errors.add_metric([], usage.store_errors)
        yield errors


def collector_registry(collector: Collector) -> CollectorRegistry:
    """A registry of ``collector`` alone (nothing global: two apps in one process,
    as in the tests, never share metrics)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    """The scrape body (text format 0.0.4, ``CONTENT_TYPE``)."""
    return generate_latest(registry)
