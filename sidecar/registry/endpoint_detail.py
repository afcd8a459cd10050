"""The document of ``GET /api/v1/endpoints/{id}`` (pure): one endpoint's
registry fields, health, state horizon, block heights against its network, the node's
capacity (budget, learned rate, back-off), the last probes (newest first) and
its incidents."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from common.config import Config, Endpoint
from sidecar.jsonfmt import iso
from sidecar.probing.health import chain_heads
from sidecar.probing.results import ProbeResult
from sidecar.registry.pools import HealthMap, health_of, horizon_doc
from sidecar.registry.routing_snapshot import route
from sidecar.registry.upstream import NO_REPORTS, UpstreamLive, capacity


def endpoint_detail(
    config: Config,
    endpoint: Endpoint,
    health: HealthMap,
    probes: Iterable[ProbeResult],
    incidents: list[dict[str, Any]],
    live: UpstreamLive = NO_REPORTS,
) -> dict[str, Any]:
    """``probes`` newest first; ``incidents`` as ``RegistryService.endpoint_incidents``
    gives them. Lag and ``synced`` are the routing snapshot's
    (``sidecar.registry.routing_snapshot``); ``backoff_until``, ``budget`` and
    ``learned_rps`` are ``sidecar.registry.upstream.capacity``'s."""
    h = health_of(health, endpoint)
    nodes = [e for e in config.endpoints if e.network == endpoint.network]
    tip, finalized = chain_heads(nodes, health)
    r = route(endpoint, h, tip, config.networks[endpoint.network].max_lag_blocks)
    return {
        "id": endpoint.id,
        "url": endpoint.safe_url,
        "provider": endpoint.provider,
        "kind": endpoint.kind,
        "network": endpoint.network,
        "subnet": f"{endpoint.subnet:03d}",
        "archive": r.archive,
        "horizon": horizon_doc(h),
        "region": endpoint.region,
        "notes": endpoint.notes,
        "status": h.status,
        "classification": h.classification,
        "probed": h.probed,
        "latency_ms": r.latency_ms,
        "score": r.score,
        "heights": {
            "best": h.best,
            "finalized": h.finalized,
            "tip": tip,
            "network_finalized": finalized,
            "lag": r.lag,
            "synced": r.synced,
        },
        "last_probe_at": iso(h.last_probe_at),
        "last_ok_at": iso(h.last_ok_at),
        **capacity(endpoint, live),
        "probes": [probe_row(p) for p in probes],
        "incidents": incidents,
    }


def probe_row(p: ProbeResult) -> dict[str, Any]:
    return {
        "at": iso(p.at),
        "kind": p.kind,
        "classification": p.classification,
        "latency_ms": p.latency_ms,
        "best": p.best,
        "finalized": p.finalized,
        "archive": p.archive,
        "detail": p.detail,
    }
