"""Chain tip, lag and the ranked routing snapshot the addon reads (pure).

Tip = the highest best block reported by a healthy node endpoint of the
network (``sidecar.probing.health.chain_heads``); lag = tip - best; synced =
lag <= max_lag_blocks. Tiers: 0 healthy and synced, 1 healthy but lagging, 2
not yet probed, 3 unhealthy.

Each upstream also carries its state horizon (``sidecar.probing.horizon``),
added to the contract, never renamed: ``horizon`` (the earliest block whose
state it is known to hold, at its best; null: not known), ``horizon_lost``
(the latest block known to be without state), ``keeps`` (it keeps the state
of its last K blocks: the addon moves ``horizon`` up with the node's best)
and ``horizon_rounds`` (the rounds of state checks folded so far: the addon
keeps a correction of its own until the sidecar has checked again).
``archive`` comes from the horizon when it is known.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from common.config import Endpoint
from sidecar.jsonfmt import iso
from sidecar.probing.health import Health, chain_heads
from sidecar.probing.results import NODE_KINDS
from sidecar.registry.pools import archive_capable


@dataclass(frozen=True, slots=True)
class Route:
    id: str
    url: str  # redacted: the addon maps ids to real URLs from its own config
    provider: str
    archive: bool
    healthy: bool
    synced: bool
    lag: int | None
    best: int | None
    finalized: int | None  # its finalized height (archive_v1_finalizedHeight takes the least)
    latency_ms: int | None
    score: float
    tier: int
    status: str  # OK / Degraded / Unknown
    classification: str  # live, unknown, or the last failure reason
    horizon: int | None = None  # the earliest block whose state it is known to hold
    horizon_lost: int | None = None  # the latest block known to be without state
    keeps: int | None = None  # the state of its last K blocks (a pruned node)
    horizon_rounds: int = 0  # rounds of state checks folded in


def route(e: Endpoint, h: Health | None, tip: int | None, max_lag: int) -> Route:
    h = h or Health()
    # A node ahead of the tip (the tip counts healthy nodes only) has no lag.
    lag = max(0, tip - h.best) if tip is not None and h.best is not None else None
    synced = lag is not None and lag <= max_lag
    if h.healthy:
        tier = 0 if synced else 1
    elif not h.probed:
        tier = 2
    else:
        tier = 3
    return Route(
        id=e.id,
        url=e.safe_url,
        provider=e.provider,
        archive=archive_capable(e, h),
        healthy=h.healthy,
        synced=synced,
        lag=lag,
        best=h.best,
        finalized=h.finalized,
        latency_ms=round(h.latency_ms) if h.latency_ms is not None else None,
        score=round(h.score, 3),
        tier=tier,
        status=h.status,
        classification=h.classification,
        horizon=h.horizon.earliest(h.best),
        horizon_lost=h.horizon.latest_lost(h.best),
        keeps=h.horizon.keeps,
        horizon_rounds=h.horizon.rounds,
    )


def snapshot(
    network: str,
    endpoints: Iterable[Endpoint],
    health: Mapping[str, Health],
    *,
    max_lag: int,
    now: float,
) -> dict[str, Any]:
    """The document served at ``/api/v1/internal/routes/<network>``: node-rpc
    upstreams of the network, best first (``upstreams``, for calls), and the
    node-wss ones the same way (``ws_upstreams``, for subscriptions)."""
    nodes = [e for e in endpoints if e.network == network and e.kind in NODE_KINDS]
    tip, finalized = chain_heads(nodes, health)

    def ranked(kind: str) -> list[dict[str, Any]]:
        routes = [route(e, health.get(e.id), tip, max_lag) for e in nodes if e.kind == kind]
        routes.sort(key=lambda r: (r.tier, r.latency_ms if r.latency_ms is not None else 1e9, r.id))
        return [asdict(r) for r in routes]

    return {
        "network": network,
        "tip": tip,
        "finalized": finalized,
        "generated_at": iso(now),
        "upstreams": ranked("node-rpc"),
        "ws_upstreams": ranked("node-wss"),
    }
