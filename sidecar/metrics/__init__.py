"""Prometheus metrics at ``/metrics`` (prometheus-client): the collector and
the scrape body (``collector``), and the families it gathers from the
registry and prober (``registry_families``) and from the proxies' usage
batches (``proxy_families``). Every name is listed in ``deploy/README.md``."""

from sidecar.metrics.collector import (
    CONTENT_TYPE,
    SidecarCollector,
    collector_registry,
    exposition,
)

__all__ = ["CONTENT_TYPE", "SidecarCollector", "collector_registry", "exposition"]
