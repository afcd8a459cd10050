"""Pools and registry totals, as the public JSON API and the dashboard show them (pure).

* **Pools**: per network of the config (config order), ``<network>-rpc`` (its
  ``node-rpc`` endpoints), ``<network>-wss`` (``node-wss``) and
  ``<network>-archive`` (its archive-capable node endpoints of either kind),
  in that order; a pool without members is not listed.
* **archive-capable**: the endpoint's measured state horizon when known
  (``sidecar.probing.horizon``: state from block 0 or 1 on), else its last
  conclusive archive probe (historical state at block 1 readable), else the
  config's ``archive`` flag (the routing snapshot's rule). ``horizon_doc``:
  the horizon as the documents show it.
* **proxy-eligible**: the members serve live traffic through the proxy, for
  networks in ``proxy.networks``: the ``-rpc`` and ``-archive`` pools (with a
  ``node-rpc`` member) take its calls, the ``-wss`` pools its WebSocket
  subscriptions (docs/USING.md#subscriptions).
* **eligible** members: healthy ones (status ``OK``); **best endpoint**: the
  healthy member with the lowest latency (EWMA), ties by id; null when none.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from common.config import Config, Endpoint
from sidecar.jsonfmt import pct
from sidecar.probing.health import Health
from sidecar.probing.results import NODE_KINDS

HealthMap = Mapping[str, Health]
_NO_HEALTH = Health()


def health_of(health: HealthMap, e: Endpoint) -> Health:
    """The endpoint's health; ``Health()`` (Unknown, not probed) when absent."""
    return health.get(e.id, _NO_HEALTH)


def archive_capable(e: Endpoint, h: Health) -> bool:
    earliest = h.horizon.earliest(h.best)
    if earliest is not None:
        return earliest <= 1
    return h.archive if h.archive is not None else e.archive


def horizon_doc(h: Health) -> dict[str, Any]:
    """A node's state horizon at its best block: ``earliest`` (the earliest
    block whose state it is known to hold; 0: an archive), ``lost`` (the latest
    block known to be without state), ``keeps`` (K of a node that keeps the
    state of its last K blocks), ``model`` (``archive``, ``window``: keeps the
    last K, ``fixed``: every block's from one on, ``unknown``), ``exact`` (the
    model and its edge are known to the block) and ``rounds`` of checks."""
    hz = h.horizon
    return {
        "earliest": hz.earliest(h.best),
        "lost": hz.latest_lost(h.best),
        "keeps": hz.keeps,
        "model": hz.model,
        "exact": hz.exact,
        "rounds": hz.rounds,
    }


@dataclass(frozen=True, slots=True)
class Pool:
    name: str  # <network>-rpc | <network>-wss | <network>-archive
    network: str
    kind: str  # node-rpc | node-wss | archive
    members: tuple[Endpoint, ...]


def pools(config: Config, health: HealthMap) -> list[Pool]:
    out = []
    for network in config.networks:
        nodes = [e for e in config.endpoints if e.network == network and e.kind in NODE_KINDS]
        groups = (
            ("rpc", "node-rpc", [e for e in nodes if e.kind == "node-rpc"]),
            ("wss", "node-wss", [e for e in nodes if e.kind == "node-wss"]),
            ("archive", "archive", [e for e in nodes if archive_capable(e, health_of(health, e))]),
        )
        for suffix, kind, members in groups:
            if members:
                out.append(Pool(f"{network}-{suffix}", network, kind, tuple(members)))
    return out


def proxy_eligible(config: Config, pool: Pool) -> bool:
    if pool.network not in config.proxy.networks:
        return False
    if pool.kind == "node-wss":
        return True  # upstream subscriptions are held on node-wss endpoints
    return any(e.kind == "node-rpc" for e in pool.members)  # calls go over HTTP


def proxy_pools(config: Config, health: HealthMap) -> list[dict[str, Any]]:
    """``GET /api/v1/pools/rpc``: ``[{pool, region, members, archive, proxy_eligible}]``;
    ``region`` is the members' common region or ""; ``archive`` is true when
    every member is archive-capable (always for ``-archive`` pools)."""
    rows = []
    for p in pools(config, health):
        regions = {e.region for e in p.members}
        rows.append(
            {
                "pool": p.name,
                "region": regions.pop() if len(regions) == 1 else "",
                "members": len(p.members),
                "archive": all(archive_capable(e, health_of(health, e)) for e in p.members),
                "proxy_eligible": proxy_eligible(config, p),
            }
        )
    return rows


def best_endpoint(members: Iterable[Endpoint], health: HealthMap) -> str | None:
    healthy = [e for e in members if health_of(health, e).healthy]
    if not healthy:
        return None

    def key(e: Endpoint) -> tuple[float, str]:
        lat = health_of(health, e).latency_ms
        return (lat if lat is not None else math.inf, e.id)

    return min(healthy, key=key).id


def endpoint_pools(config: Config, health: HealthMap) -> list[dict[str, Any]]:
    """``GET /api/v1/pools/endpoints``: ``[{pool, kind, eligible, total, best_endpoint}]``."""
    return [
        {
            "pool": p.name,
            "kind": p.kind,
            "eligible": sum(health_of(health, e).healthy for e in p.members),
            "total": len(p.members),
            "best_endpoint": best_endpoint(p.members, health),
        }
        for p in pools(config, health)
    ]


def registry_totals(config: Config, health: HealthMap) -> dict[str, Any]:
    """``GET /api/v1/registry/totals``. ``rpc_pools`` counts every listed pool
    (rpc, wss, archive); ``healthy_pct`` = healthy / probed * 100 (2 decimals,
    0 when nothing is probed yet)."""
    hs = [health_of(health, e) for e in config.endpoints]
    eligible = [proxy_eligible(config, p) for p in pools(config, health)]
    healthy = sum(h.healthy for h in hs)
    probed = sum(h.probed for h in hs)
    return {
        "endpoints_tracked": len(config.endpoints),
        "rpc_pools": len(eligible),
        "rpc_pools_proxy_eligible": sum(eligible),
        "archive_capable": sum(
            archive_capable(e, h) for e, h in zip(config.endpoints, hs, strict=True)
        ),
        "healthy_pct": pct(healthy, probed),
        "healthy": healthy,
        "probed": probed,
    }
