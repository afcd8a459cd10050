"""Metric families of the networks' chain runtimes (pure: config and runtime book
in, families out): runtime upgrades seen since start, the spec version the
best blocks run."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from common.config import Config
from sidecar.probing.chain_runtime import ChainRuntimeBook


def chain_runtime_families(config: Config, book: ChainRuntimeBook) -> Iterator[Metric]:
    upgrades = CounterMetricFamily(
        "chainproxy_runtime_upgrades",
        "Runtime upgrades seen since start: the spec version of the network's best blocks"
        " (healthy, synced nodes' head probes) changed",
        labels=["network"],
    )
    spec = GaugeMetricFamily(
        "chainproxy_runtime_spec_version",
        "The spec version the network's best blocks run (as the head probes read it)",
        labels=["network"],
    )
    for network in config.networks:
        upgrades.add_metric([network], book.upgrades.get(network, 0))
        state = book.get(network)
        if state is not None:
            spec.add_metric([network], state.runtime.spec_version)
    yield from (upgrades, spec)
