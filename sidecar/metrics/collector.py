"""The sidecar's Prometheus collector and the ``/metrics`` body.

A custom collector reads the live state at scrape time (no metric objects to
keep in sync, nothing global): the registry's families
(``registry_families``: endpoint status and latency, heads, lag, healthy
upstreams, probe results), the proxies' (``proxy_families``: the contract
counters and gauges of the batches' metrics section, usage intake), the
nodes' budgets and capacity (``upstream_families``), the networks' runtimes
(``chain_runtime_families``: upgrades, spec version), the depth of the local
on-disk usage spool and the open incidents. It is given
callables rather than the app, so this package knows nothing of the app's
keys (``sidecar.server.app`` wires it, ``sidecar.server.handlers.ops`` serves it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import diskcache
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from common.config import Config
from sidecar.metrics.chain_runtime_families import chain_runtime_families
from sidecar.metrics.proxy_families import UsageIntake, usage_families
from sidecar.metrics.registry_families import endpoint_families
from sidecar.metrics.upstream_families import budget_families
from sidecar.probing.prober import Prober

log = logging.getLogger("chainproxy.sidecar.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class SidecarCollector(Collector):
    def __init__(
        self,
        config: Config,
        prober: Callable[[], Prober | None],
        usage: Callable[[], UsageIntake | None],
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
            yield from endpoint_families(self.config, prober)
            if prober.chain_runtimes is not None:
                yield from chain_runtime_families(self.config, prober.chain_runtimes)
        yield from budget_families(self.config)
        usage = self._usage()
        if usage is not None:
            yield from usage_families(usage, self.config.proxy.networks)
        depth = self._spool_depth()
        if depth is not None:
            g = GaugeMetricFamily(
                "chainproxy_usage_spool_batches",
                "Usage batches waiting in the spool in this sidecar's data_dir",
            )
            g.add_metric([], depth)
            yield g
        incidents = self._open_incidents()
        if incidents is not None:
            g = GaugeMetricFamily("chainproxy_incidents_open", "Incidents currently ongoing")
            g.add_metric([], incidents)
            yield g


def collector_registry(collector: Collector) -> CollectorRegistry:
    """A registry of ``collector`` alone (nothing global: two apps in one process,
    as in the tests, never share metrics)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    """The scrape body (text format 0.0.4, ``CONTENT_TYPE``)."""
    return generate_latest(registry)
