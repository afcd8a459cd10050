"""The ``data`` of each Metagraphed registry path, and the list each one pages (pure).

Every builder takes a ``rows.RegistryState`` (config, health, now) and, for incidents,
the tracker's incidents; the handler (``sidecar.server.handlers.metagraphed``) runs the
list engine over ``data[collection.key]``. Summaries are over the whole
collection, as Metagraphed's artifacts have them; ``meta.pagination.total``
counts what the filters kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sidecar.incidents.tracker import Incident
from sidecar.jsonfmt import iso
from sidecar.metagraphed import vocab
from sidecar.metagraphed.listing import Collection, Filter
from sidecar.metagraphed.rows import (
    RegistryState,
    Row,
    count_by,
    endpoint_rows,
    endpoint_summary,
    incident_row,
    pool_member_row,
    provider_rows,
    rpc_endpoint_row,
)
from sidecar.probing.results import NODE_KINDS
from sidecar.registry.pools import best_endpoint, health_of, pools

SOURCE = "chainproxy"
INCIDENT_WINDOW_S = 7 * 86_400
_NETUID = Filter("int", maximum=65535)
_STATUS = Filter("enum", vocab.STATUSES)
_ENDPOINT_FILTERS = {
    "kind": Filter("enum", vocab.ENDPOINT_KINDS),
    "layer": Filter("enum", vocab.LAYERS),
    "netuid": _NETUID,
    "pool_eligible": Filter("enum", ("true", "false")),
    "provider": Filter(),
    "publication_state": Filter("enum", vocab.PUBLICATION_STATES),
    "status": _STATUS,
}
_ENDPOINT_SORT = (
    "kind",
    "last_checked",
    "latency_ms",
    "layer",
    "netuid",
    "pool_eligible",
    "provider",
    "publication_state",
    "score",
    "status",
)
# csv is Metagraphed's too, but chainproxy answers JSON only (a csv ask is refused).
ENDPOINTS = Collection(
    "endpoints",
    _ENDPOINT_FILTERS,
    ("latency_ms", "score"),
    _ENDPOINT_SORT,
    {"format": ("json",)},
)
RPC_ENDPOINTS = Collection("endpoints", _ENDPOINT_FILTERS, ("latency_ms", "score"), _ENDPOINT_SORT)
PROVIDER_ENDPOINTS = Collection(
    "endpoints",
    {k: f for k, f in _ENDPOINT_FILTERS.items() if k != "provider"},
    ("latency_ms", "score"),
    _ENDPOINT_SORT,
    {"format": ("json",)},
)
POOLS = Collection(
    "pools",
    {"id": Filter(), "kind": Filter("enum", vocab.POOL_KINDS)},
    ("eligible_count", "endpoint_count"),
    ("eligible_count", "endpoint_count", "id", "kind"),
)
ENDPOINT_INCIDENTS = Collection(
    "incidents",
    {
        "netuid": _NETUID,
        "kind": Filter("enum", vocab.ENDPOINT_KINDS),
        "provider": Filter(),
        "status": _STATUS,
        "severity": Filter("enum", vocab.SEVERITIES),
        "state": Filter("enum", vocab.INCIDENT_STATES),
    },
    (),
    (
        "detected_at",
        "endpoint_id",
        "kind",
        "last_checked",
        "netuid",
        "provider",
        "severity",
        "state",
        "status",
    ),
)
PROVIDERS = Collection(
    "providers",
    {
        "id": Filter(),
        "kind": Filter("enum", vocab.PROVIDER_KINDS),
        "authority": Filter("enum", vocab.AUTHORITIES),
    },
    (),
    ("authority", "id", "kind", "name"),
    {"format": ("json",)},
)
HEALTH = Collection(
    "subnets",
    {"netuid": _NETUID, "status": _STATUS},
    (),
    (
        "avg_latency_ms",
        "degraded_count",
        "failed_count",
        "last_checked",
        "last_ok",
        "name",
        "netuid",
        "ok_count",
        "status",
        "surface_count",
        "unknown_count",
    ),
)
# Metagraphed's cross-subnet downtime (its /api/v1/incidents; chainproxy's own path
# of that name is another document, so this one is served under /metagraphed/).
DOWNTIME = Collection(
    "surfaces",
    {"netuid": _NETUID},
    (),
    ("downtime_ms", "incident_count", "netuid", "surface_id"),
    {"window": ("7d", "30d")},
)


def _base(state: RegistryState) -> Row:
    return {
        "schema_version": 1,
        "contract_version": vocab.CONTRACT_VERSION,
        "generated_at": iso(state.now),
    }


def endpoints(state: RegistryState) -> Row:
    rows = endpoint_rows(state, state.config.endpoints)
    return {
        **_base(state),
        "source": SOURCE,
        "notes": "chainproxy's registry: every endpoint of registry.endpoints, probed.",
        "summary": endpoint_summary(rows),
        "endpoints": rows,
    }


def rpc_endpoints(state: RegistryState) -> Row:
    rows = [rpc_endpoint_row(state, e) for e in state.config.endpoints if e.kind in NODE_KINDS]
    rows.sort(key=lambda r: (r["provider"], r["id"]))
    return {
        **_base(state),
        "source": SOURCE,
        "summary": {
            "endpoint_count": len(rows),
            "by_kind": count_by(rows, "kind"),
            "by_provider": count_by(rows, "provider"),
            "by_status": count_by(rows, "status"),
            "archive_supported_count": sum(r["archive_support"] is True for r in rows),
        },
        "endpoints": rows,
    }


def endpoint_pools(state: RegistryState) -> Row:
    """``/api/v1/rpc/pools`` and ``/api/v1/endpoint-pools``: chainproxy's pools
    (``<network>-rpc``, ``-wss``, ``-archive``, named as Metagraphed names them),
    members eligible first, then by latency; the best endpoint is chainproxy's."""
    out = []
    for p in pools(state.config, state.health):
        members = [pool_member_row(state, e) for e in p.members]
        members.sort(
            key=lambda r: (
                not r["pool_eligible"],
                r["latency_ms"] if r["latency_ms"] is not None else float("inf"),
                r["id"],
            )
        )
        out.append(
            {
                "id": p.name,
                "kind": vocab.kind(p.kind),
                "endpoint_count": len(members),
                "eligible_count": sum(r["pool_eligible"] for r in members),
                "best_endpoint_id": best_endpoint(p.members, state.health),
                "endpoints": members,
            }
        )
    return {
        **_base(state),
        "source": "rpc-endpoint-probes",
        "notes": "chainproxy's pools: eligible members are the node endpoints whose status is OK.",
        "pools": out,
    }


def endpoint_incidents(state: RegistryState, incidents: Sequence[Incident]) -> Row:
    """Every ongoing incident and those resolved in the last 7 days, of endpoints
    in the registry: active first, then by severity, newest first."""
    by_id = {e.id: e for e in state.config.endpoints}
    since = state.now - INCIDENT_WINDOW_S
    chosen = [i for i in incidents if i.endpoint_id in by_id and i.overlaps(since)]
    rows = [incident_row(state, i, by_id[i.endpoint_id]) for i in chosen]
    rank = {s: n for n, s in enumerate(vocab.SEVERITIES)}
    rows.sort(key=lambda r: r["detected_at"] or "", reverse=True)
    rows.sort(key=lambda r: (r["state"] != "active", rank[r["severity"]]))
    return {
        **_base(state),
        "source": "endpoint-resource-probes",
        "summary": {
            "incident_count": len(rows),
            "active_count": sum(r["state"] == "active" for r in rows),
            "by_kind": count_by(rows, "kind"),
            "by_layer": count_by(rows, "layer"),
            "by_provider": count_by(rows, "provider"),
            "by_severity": count_by(rows, "severity"),
            "by_status": count_by(rows, "status"),
        },
        "incidents": rows,
    }


def providers(state: RegistryState) -> Row:
    return {**_base(state), "providers": provider_rows(state.config)}


def provider_detail(state: RegistryState, name: str) -> Row:
    row = next(r for r in provider_rows(state.config) if r["name"] == name)
    mine = endpoint_rows(state, (e for e in state.config.endpoints if e.provider == name))
    return {**_base(state), "provider": row, "endpoint_summary": endpoint_summary(mine)}


def provider_endpoints(state: RegistryState, name: str) -> Row:
    row = next(r for r in provider_rows(state.config) if r["name"] == name)
    rows = endpoint_rows(state, (e for e in state.config.endpoints if e.provider == name))
    return {
        **_base(state),
        "provider": {"id": row["id"], "name": name},
        "summary": endpoint_summary(rows),
        "endpoints": rows,
    }


def health(state: RegistryState) -> Row:
    """``/api/v1/health``: per subnet of the registry, its endpoints' statuses rolled
    up the way Metagraphed rolls them up."""
    by_subnet: dict[int, list[Any]] = {}
    for e in state.config.endpoints:
        by_subnet.setdefault(e.subnet, []).append(health_of(state.health, e))
    rows = []
    for netuid, hs in sorted(by_subnet.items()):
        statuses = [vocab.status(h) for h in hs]
        lat = [h.latency_ms for h in hs if h.latency_ms is not None]
        checked = [h.last_probe_at for h in hs if h.last_probe_at is not None]
        ok_at = [h.last_ok_at for h in hs if h.last_ok_at is not None]
        rows.append(
            {
                "netuid": netuid,
                "status": vocab.rollup(statuses),
                "surface_count": len(hs),
                **{f"{s}_count": statuses.count(s) for s in vocab.STATUSES},
                "avg_latency_ms": round(sum(lat) / len(lat)) if lat else None,
                "latency_sample_count": len(lat),
                "last_checked": iso(max(checked)) if checked else None,
                "last_ok": iso(max(ok_at)) if ok_at else None,
            }
        )
    all_statuses = [vocab.status(health_of(state.health, e)) for e in state.config.endpoints]
    checked = [h.last_probe_at for h in state.health.values() if h.last_probe_at is not None]
    return {
        **_base(state),
        "source": SOURCE,
        "health_source": "probe-derived",
        "scope": "registry",
        "operational_observed_at": iso(max(checked)) if checked else None,
        "global": {
            "surface_count": len(all_statuses),
            "status_counts": {s: all_statuses.count(s) for s in vocab.STATUSES},
        },
        "subnets": rows,
    }


def downtime(state: RegistryState, incidents: Sequence[Incident], window_s: float) -> Row:
    """Metagraphed's ``/api/v1/incidents`` from chainproxy's incidents: per endpoint
    with any in the window, their spans in epoch ms (an ongoing one ends now).
    The probe counts Metagraphed adds (failed and transient samples) are not
    kept by chainproxy: null."""
    by_id = {e.id: e for e in state.config.endpoints}
    since = state.now - window_s
    per: dict[str, list[Row]] = {}
    for i in sorted(incidents, key=lambda i: i.started):
        if i.endpoint_id not in by_id or not i.overlaps(since):
            continue
        end = i.ended if i.ended is not None else state.now
        start = max(i.started, since)
        per.setdefault(i.endpoint_id, []).append(
            {
                "started_at": round(start * 1000),
                "ended_at": round(end * 1000),
                "duration_ms": round((end - start) * 1000),
                "failed_samples": None,
            }
        )
    surfaces = [
        {
            "surface_id": eid,
            "netuid": by_id[eid].subnet,
            "incident_count": len(spans),
            "downtime_ms": sum(s["duration_ms"] for s in spans),
            "incidents": spans,
            "transient_failed_samples": None,
            "transient_failure_count": None,
        }
        for eid, spans in per.items()
    ]
    surfaces.sort(key=lambda s: (-s["downtime_ms"], s["surface_id"]))
    return {
        "schema_version": 1,
        "window": f"{round(window_s / 86_400)}d",
        "observed_at": iso(state.now),
        "source": "chainproxy-incidents",
        "min_incident_samples": state.config.probe.fail_threshold,
        "summary": {
            "affected_surface_count": len(surfaces),
            "incident_count": sum(s["incident_count"] for s in surfaces),
        },
        "surfaces": surfaces,
    }
