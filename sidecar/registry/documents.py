"""The registry as the public JSON API and the dashboard show it (pure).

Every function takes the config, the Prober's health map (endpoint id →
``Health``; a missing id is "not probed yet") and, for incidents, the
incidents (``IncidentTracker.incidents()``) and ``now`` (unix time), and
returns the JSON-ready document of one ``/api/v1/…`` path (``sidecar.server.routes``
maps each path to its document; the dashboard renders the same dicts). No I/O,
no aiohttp. This module re-exports the pool documents of ``sidecar.registry.pools``.

| function | document |
|---|---|
| ``registry_totals(config, health)`` | ``GET /api/v1/registry/totals`` |
| ``proxy_pools(config, health)`` | ``GET /api/v1/pools/rpc`` |
| ``endpoint_pools(config, health)`` | ``GET /api/v1/pools/endpoints`` |
| ``root_endpoints(config, health, live)`` | ``GET /api/v1/endpoints/root`` |
| ``callable_endpoints(config, health, page, live=)`` | ``GET /api/v1/endpoints/callable?page=N`` |
| ``heatmap(config, health)`` | ``GET /api/v1/heatmap`` |
| ``incident_list(config, incidents, now)`` | ``GET /api/v1/incidents`` |
| ``incident_timeline(config, incidents, now)`` | ``GET /api/v1/incidents/timeline`` |
| ``endpoint_incidents(incidents, id, now)`` | ``incidents`` of ``GET /api/v1/endpoints/{id}`` |

Shared definitions: **healthy** = status ``OK``; **probed** = at least one
probe answered or failed; **latency_ms** = the EWMA of successful probes'
latencies, rounded (null before the first success); **host** = the hostname
of the endpoint's redacted URL; archive-capable, the state horizon and
pools: ``sidecar.registry.pools``; an endpoint row's ``backoff_until``,
``budget`` and ``learned_rps``: ``sidecar.registry.upstream`` (``live`` = the
proxies' reports).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

from common.config import KINDS, Config, Endpoint
from common.endpoint_id import redact_url
from sidecar.incidents.tracker import Incident, format_duration
from sidecar.jsonfmt import iso
from sidecar.probing.health import Health
from sidecar.probing.results import NODE_KINDS
from sidecar.registry.pools import (
    HealthMap,
    archive_capable,
    endpoint_pools,
    health_of,
    horizon_doc,
    proxy_pools,
    registry_totals,
)
from sidecar.registry.upstream import NO_REPORTS, UpstreamLive, capacity

__all__ = [
    "PageError",
    "callable_endpoints",
    "endpoint_incidents",
    "endpoint_pools",
    "heatmap",
    "incident_list",
    "incident_row",
    "incident_timeline",
    "latency_bucket",
    "parse_page",
    "proxy_pools",
    "registry_totals",
    "root_endpoints",
    "ws_url",
]

PAGE_SIZE = 25
BUCKETS = (150, 400, 1000)  # heatmap bucket upper edges (exclusive), ms
TIMELINE_WINDOW_S = 86_400
INCIDENT_LIST_WINDOW_S = 7 * 86_400
INCIDENT_LIST_LIMIT = 200
ENDPOINT_INCIDENTS_LIMIT = 50
_WS_DEFAULT_PORTS = {"ws": 80, "wss": 443}


class PageError(ValueError):
    """A ``page`` that cannot be served; ``status`` is 400 (not a page number) or
    404 (past the end)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


# --- per endpoint ------------------------------------------------------------------------


def latency_ms(h: Health) -> int | None:
    return round(h.latency_ms) if h.latency_ms is not None else None


def host_of(e: Endpoint) -> str:
    return urlsplit(e.safe_url).hostname or ""


def ws_url(e: Endpoint) -> str | None:
    """A ``node-wss`` endpoint's redacted URL with its port always shown
    (``wss://host:443``); None for every other kind."""
    if e.kind != "node-wss":
        return None
    url = redact_url(e.url, keep_default_port=True)
    parts = urlsplit(url)
    if parts.port is None and parts.scheme in _WS_DEFAULT_PORTS:
        netloc = f"{parts.netloc}:{_WS_DEFAULT_PORTS[parts.scheme]}"
        url = parts._replace(netloc=netloc).geturl()
    return url


# --- endpoint lists ------------------------------------------------------------------------


def root_endpoints(
    config: Config, health: HealthMap, live: UpstreamLive = NO_REPORTS
) -> dict[str, Any]:
    """Subnet-0 node endpoints in config order. ``status`` is OK/Degraded/Unknown
    (the dashboard shows Unknown-and-unprobed as empty); ``latency_ms`` null
    until a probe succeeded; then the node's capacity (``upstream.capacity``).
    Summary: ``ok``/``unknown`` count statuses."""
    rows = []
    for e in config.endpoints:
        if e.subnet != 0 or e.kind not in NODE_KINDS:
            continue
        h = health_of(health, e)
        rows.append(
            {
                "id": e.id,
                "provider": e.provider,
                "kind": e.kind,
                "classification": h.classification,
                "status": h.status,
                "archive": archive_capable(e, h),
                "horizon": horizon_doc(h),
                "latency_ms": latency_ms(h) if h.probed else None,
                **capacity(e, live),
            }
        )
    return {
        "rows": rows,
        "summary": {
            "total": len(rows),
            "archive_capable": sum(r["archive"] for r in rows),
            "ok": sum(r["status"] == "OK" for r in rows),
            "unknown": sum(r["status"] == "Unknown" for r in rows),
        },
    }


def parse_page(raw: str | None) -> int:
    """``?page=`` → a page number ≥ 1 (absent: 1). Not a positive integer → ``PageError(400)``."""
    if raw is None:
        return 1
    if not raw.isascii() or not raw.isdigit():
        raise PageError(400, "page must be a positive integer")
    if len(raw) > 18:  # beyond any real page count (and int()'s digit limit)
        raise PageError(404, "page is past the end")
    page = int(raw)
    if page < 1:
        raise PageError(400, "page must be a positive integer (pages start at 1)")
    return page


def callable_endpoints(
    config: Config,
    health: HealthMap,
    page: int = 1,
    page_size: int = PAGE_SIZE,
    *,
    live: UpstreamLive = NO_REPORTS,
) -> dict[str, Any]:
    """Every endpoint, root (subnet 0) first then by subnet number, config order
    within a subnet; ``page`` (1-based) of ``page_size`` rows. ``pages`` is at
    least 1, so page 1 of an empty registry is valid; a page past the end →
    ``PageError(404)``, below 1 → ``PageError(400)``. ``url`` only for
    ``node-wss`` (``ws_url``); ``latency_ms`` null while the status is Unknown;
    then the node's capacity (``upstream.capacity``)."""
    if page < 1:
        raise PageError(400, "page must be a positive integer (pages start at 1)")
    ordered = sorted(enumerate(config.endpoints), key=lambda ie: (ie[1].subnet, ie[0]))
    total = len(ordered)
    pages = max(1, math.ceil(total / page_size))
    if page > pages:
        raise PageError(404, f"page {page} is past the end (pages: {pages})")
    rows = []
    for _, e in ordered[(page - 1) * page_size : page * page_size]:
        h = health_of(health, e)
        rows.append(
            {
                "id": e.id,
                "subnet": f"{e.subnet:03d}",
                "kind": e.kind,
                "url": ws_url(e),
                "provider": e.provider,
                "status": h.status,
                "latency_ms": None if h.status == "Unknown" else latency_ms(h),
                "probed": h.probed,
                **capacity(e, live),
            }
        )
    return {"total": total, "page": page, "pages": pages, "page_size": page_size, "rows": rows}


# --- heatmap ---------------------------------------------------------------------------------


def latency_bucket(ms: float | None) -> int:
    """1: < 150 ms, 2: < 400, 3: < 1000, 4: slower, or down (None/inf)."""
    if ms is None or not math.isfinite(ms):
        return 4
    for i, edge in enumerate(BUCKETS, start=1):
        if ms < edge:
            return i
    return 4


def _heat_value(h: Health) -> float | None:
    """An endpoint's latency for the heatmap: inf when down (Degraded, or probed
    and never answered), None when not probed yet (left out)."""
    if h.status == "Degraded":
        return math.inf
    if h.latency_ms is not None:
        return h.latency_ms
    return math.inf if h.probed else None


def heatmap(config: Config, health: HealthMap) -> dict[str, Any]:
    """Provider x kind cells: ``p50_ms`` = median of the members' latencies, a
    down member counting as infinitely slow (so ``p50_ms`` is null and the
    bucket 4 when at least half are down); ``bucket`` from the rounded
    ``p50_ms`` (exactly 150 → 2, 400 → 3, 1000 → 4); both null when none of
    the cell's endpoints is probed yet. Providers sorted by name; kinds in
    the order of ``common.config.KINDS``."""
    cells: dict[str, dict[str, list[Health]]] = {}
    for e in config.endpoints:
        cells.setdefault(e.provider, {}).setdefault(e.kind, []).append(health_of(health, e))
    rows = []
    for provider in sorted(cells):
        out: dict[str, Any] = {}
        for kind, hs in sorted(cells[provider].items(), key=lambda kv: _kind_order(kv[0])):
            values = [v for v in map(_heat_value, hs) if v is not None]
            if not values:
                out[kind] = {"p50_ms": None, "bucket": None, "endpoints": len(hs)}
                continue
            p50 = statistics.median(values)
            p50_ms = round(p50) if math.isfinite(p50) else None
            out[kind] = {"p50_ms": p50_ms, "bucket": latency_bucket(p50_ms), "endpoints": len(hs)}
        rows.append({"provider": provider, "cells": out})
    return {"buckets": list(BUCKETS), "rows": rows}


def _kind_order(kind: str) -> tuple[int, str]:
    return (KINDS.index(kind) if kind in KINDS else len(KINDS), kind)


# --- incidents -------------------------------------------------------------------------------


def incident_row(inc: Incident, now: float) -> dict[str, Any]:
    """``{severity, endpoint, state, started, ended, duration, message}``."""
    return {
        "severity": inc.severity(now),
        "endpoint": inc.endpoint_id,
        "state": inc.state,
        "started": iso(inc.started),
        "ended": iso(inc.ended),
        "duration": format_duration(inc.duration_s(now)),
        "message": inc.message,
    }


def incident_list(
    config: Config,
    incidents: Sequence[Incident],
    now: float,
    *,
    window_s: float = INCIDENT_LIST_WINDOW_S,
    limit: int = INCIDENT_LIST_LIMIT,
) -> dict[str, Any]:
    """``{hosts, incidents}``: every ongoing incident and those resolved within
    ``window_s`` (7 days), of endpoints in the registry, newest first, at most
    ``limit``; ``hosts`` = distinct hosts among them (the list's header:
    "N hosts · M incidents")."""
    by_id = {e.id: e for e in config.endpoints}
    chosen = [i for i in _newest_first(incidents) if i.endpoint_id in by_id]
    chosen = [i for i in chosen if i.overlaps(now - window_s)][:limit]
    return {
        "hosts": len({host_of(by_id[i.endpoint_id]) for i in chosen}),
        "incidents": [incident_row(i, now) for i in chosen],
    }


def incident_timeline(
    config: Config,
    incidents: Sequence[Incident],
    now: float,
    *,
    window_s: float = TIMELINE_WINDOW_S,
) -> dict[str, Any]:
    """The last 24 h: a row per registry endpoint ``{endpoint, ongoing, total}``
    (incidents ongoing now / ongoing at any time in the window) and per host
    ``{host, ongoing, total, links}`` (``links`` = ids of the host's endpoints,
    sorted). Rows with ongoing incidents first, then by total, then config
    order (endpoints) or host name (hosts)."""
    per: dict[str, list[int]] = {e.id: [0, 0] for e in config.endpoints}
    for inc in incidents:
        if inc.endpoint_id in per and inc.overlaps(now - window_s):
            per[inc.endpoint_id][1] += 1
            per[inc.endpoint_id][0] += inc.ongoing
    order = {e.id: n for n, e in enumerate(config.endpoints)}
    endpoints = sorted(per.items(), key=lambda kv: (-kv[1][0], -kv[1][1], order[kv[0]]))
    hosts: dict[str, dict[str, Any]] = {}
    for e in config.endpoints:
        row = hosts.setdefault(
            host_of(e), {"host": host_of(e), "ongoing": 0, "total": 0, "links": []}
        )
        row["ongoing"] += per[e.id][0]
        row["total"] += per[e.id][1]
        row["links"].append(e.id)
    for row in hosts.values():
        row["links"].sort()
    return {
        "endpoints": [{"endpoint": eid, "ongoing": o, "total": t} for eid, (o, t) in endpoints],
        "hosts": sorted(hosts.values(), key=lambda r: (-r["ongoing"], -r["total"], r["host"])),
    }


def endpoint_incidents(
    incidents: Sequence[Incident],
    endpoint_id: str,
    now: float,
    *,
    limit: int = ENDPOINT_INCIDENTS_LIMIT,
) -> list[dict[str, Any]]:
    """One endpoint's incidents (all retained), newest first, at most ``limit``."""
    mine = [i for i in _newest_first(incidents) if i.endpoint_id == endpoint_id]
    return [incident_row(i, now) for i in mine[:limit]]


def _newest_first(incidents: Iterable[Incident]) -> list[Incident]:
    return sorted(incidents, key=lambda i: (i.started, i.id), reverse=True)
