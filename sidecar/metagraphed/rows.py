"""chainproxy's registry as Metagraphed's endpoint, provider and incident rows (pure).

Each row carries the fields of Metagraphed's schema that chainproxy knows;
a required field it cannot know is null (``operator``, ``surface_key``,
``public_safe``, a provider's ``kind``, ``authority``, ``website_url``), an
optional one is left out. What each field is made of (docs/METAGRAPHED.md):

* ``id`` and ``surface_id``: chainproxy's endpoint id (one surface per endpoint);
* ``kind``/``layer``/``classification``/``status``: ``sidecar.metagraphed.vocab``;
  ``error``: chainproxy's own classification while the last probe failed;
* ``score``: the share of the last 20 probes that succeeded, 0-100;
* ``pool_eligible``: a node endpoint whose status is OK (the eligible members
  of ``sidecar.registry.pools``), so ``publication_state`` is
  ``pool-eligible`` or ``monitored`` (chainproxy probes every endpoint);
* ``auth_required``: true when the configured URL carries a secret or the
  node answered 401/403, false when it answered a probe without one, else null;
* ``health_stale``: never probed, or the last probe older than three probe
  intervals.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from common.config import Config, Endpoint
from sidecar.incidents.tracker import Incident
from sidecar.jsonfmt import iso
from sidecar.metagraphed import vocab
from sidecar.probing.health import Health
from sidecar.probing.results import NODE_KINDS
from sidecar.registry.pools import HealthMap, archive_capable, health_of

Row = dict[str, Any]
STALE_PROBES = 3


@dataclass(frozen=True, slots=True)
class RegistryState:
    """The registry at one moment, what every row is made from: the config, the
    Prober's health and the time."""

    config: Config
    health: HealthMap
    now: float

    def stale(self, h: Health) -> bool:
        if h.last_probe_at is None:
            return True
        return self.now - h.last_probe_at > STALE_PROBES * self.config.probe.interval_s


def pool_eligible(e: Endpoint, h: Health) -> bool:
    return e.kind in NODE_KINDS and h.healthy


def _eligibility_reasons(e: Endpoint, h: Health) -> list[str]:
    reasons = []
    if e.kind not in NODE_KINDS:
        reasons.append("not-bittensor-base-layer")
    if not h.healthy:
        reasons.append(f"status-{vocab.status(h)}")
    return reasons or ["eligible"]


def _auth_required(e: Endpoint, h: Health) -> bool | None:
    if e.safe_url != e.url or h.classification in ("http-401", "http-403"):
        return True
    return False if h.last_ok_at is not None else None


def _health_fields(state: RegistryState, h: Health) -> Row:
    mg_class = vocab.classification(h.classification) if h.probed else "unknown"
    return {
        "status": vocab.status(h),
        "classification": mg_class,
        "latency_ms": round(h.latency_ms) if h.latency_ms is not None else None,
        "latest_block": h.best,
        "observed_at": iso(h.last_probe_at),
        "health_source": "probe-derived" if h.probed else "missing-probe",
        "health_stale": state.stale(h),
        "last_ok": iso(h.last_ok_at),
        "last_checked": iso(h.last_probe_at),
        "error": None if not h.probed or h.classification == "live" else h.classification,
    }


def endpoint_row(state: RegistryState, e: Endpoint) -> Row:
    """A row of ``/api/v1/endpoints`` (and ``/providers/{slug}/endpoints``): every
    field an endpoint has; the other paths' rows are a selection of it."""
    h = health_of(state.health, e)
    kind = vocab.kind(e.kind)
    eligible = pool_eligible(e, h)
    return {
        "id": e.id,
        "surface_id": e.id,
        "surface_key": None,
        "netuid": e.subnet,
        "chain": "bittensor",
        "network": e.network,
        "layer": vocab.layer(kind),
        "kind": kind,
        "url": e.safe_url,
        "provider": e.provider,
        "operator": None,
        "auth_required": _auth_required(e, h),
        "public_safe": None,
        "monitoring_policy": {
            "enabled": True,
            "method": None,
            "expect": None,
            "source": "chainproxy-prober",
            "timeout_ms": round(state.config.probe.timeout_s * 1000),
        },
        "monitoring_status": "monitored",
        "publication_state": "pool-eligible" if eligible else "monitored",
        "pool_eligible": eligible,
        "pool_eligibility_reasons": _eligibility_reasons(e, h),
        "archive_support": archive_capable(e, h) if e.kind in NODE_KINDS else None,
        "score": round(h.score * 100),
        **_health_fields(state, h),
    }


HEALTH_FIELDS = (
    "status",
    "classification",
    "latency_ms",
    "latest_block",
    "observed_at",
    "health_source",
    "health_stale",
    "last_ok",
    "last_checked",
    "error",
)
POOL_HEALTH_FIELDS = tuple(
    f for f in HEALTH_FIELDS if f not in ("classification", "last_checked", "error")
)
# The fields of the other paths' endpoint rows, in their order (node endpoints only).
RPC_ENDPOINT_FIELDS = (
    "id",
    "netuid",
    "chain",
    "network",
    "layer",
    "kind",
    "url",
    "provider",
    "publication_state",
    "pool_eligible",
    "score",
    "archive_support",
    *HEALTH_FIELDS,
)
POOL_MEMBER_FIELDS = (
    "id",
    "surface_id",
    "kind",
    "layer",
    "url",
    "provider",
    "archive_support",
    "pool_eligible",
    "pool_eligibility_reasons",
    "score",
    *POOL_HEALTH_FIELDS,
)


def rpc_endpoint_row(state: RegistryState, e: Endpoint) -> Row:
    """A row of ``/api/v1/rpc/endpoints`` (node endpoints only)."""
    row = endpoint_row(state, e)
    return {k: row[k] for k in RPC_ENDPOINT_FIELDS}


def pool_member_row(state: RegistryState, e: Endpoint) -> Row:
    """An endpoint inside a pool of ``/api/v1/rpc/pools`` (pools hold node endpoints)."""
    row = endpoint_row(state, e)
    return {k: row[k] for k in POOL_MEMBER_FIELDS}


def count_by(rows: Iterable[Row], key: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in rows:
        k = str(r.get(key) or "unknown")
        out[k] = out.get(k, 0) + 1
    return dict(sorted(out.items()))


def endpoint_summary(rows: Sequence[Row]) -> Row:
    return {
        "endpoint_count": len(rows),
        "monitored_count": sum(r["monitoring_status"] == "monitored" for r in rows),
        "pool_eligible_count": sum(bool(r["pool_eligible"]) for r in rows),
        "by_kind": count_by(rows, "kind"),
        "by_layer": count_by(rows, "layer"),
        "by_provider": count_by(rows, "provider"),
        "by_publication_state": count_by(rows, "publication_state"),
        "by_status": count_by(rows, "status"),
    }


def endpoint_rows(state: RegistryState, endpoints: Iterable[Endpoint]) -> list[Row]:
    """Metagraphed's order: subnet, layer, kind, id."""
    rows = [endpoint_row(state, e) for e in endpoints]
    rows.sort(key=lambda r: (r["netuid"], r["layer"], r["kind"], r["id"]))
    return rows


# --- providers ---------------------------------------------------------------------------------


def provider_rows(config: Config) -> list[Row]:
    """One row per provider of the registry, by slug. ``kind``, ``authority`` and
    ``website_url`` are Metagraphed's curation, which chainproxy does not have: null."""
    slugs = vocab.provider_slugs(e.provider for e in config.endpoints)
    rows: list[Row] = []
    for name, slug in slugs.items():
        mine = [e for e in config.endpoints if e.provider == name]
        rows.append(
            {
                "id": slug,
                "slug": slug,  # the ``metagraphed`` PyPI client's Provider model reads ``slug``
                "name": name,
                "kind": None,
                "authority": None,
                "website_url": None,
                "netuids": sorted({e.subnet for e in mine}),
                "endpoint_count": len(mine),
                "surface_count": len(mine),
                "schema_version": 1,
            }
        )
    rows.sort(key=lambda r: r["id"])
    return rows


def provider_by_slug(config: Config, slug: str) -> str | None:
    """The provider name behind ``slug``, or None. A provider's name as
    configured is taken too: endpoint rows, incidents and the
    ``x-metagraph-rpc-provider`` header carry the name, which is its slug only
    when it is lower-case ``[a-z0-9-]`` (``dwellir_io.eu`` is ``dwellir-io-eu``)."""
    slugs = vocab.provider_slugs(e.provider for e in config.endpoints)
    if slug in slugs:
        return slug
    for name, s in slugs.items():
        if s == slug:
            return name
    return None


# --- incidents -----------------------------------------------------------------------------------


def incident_row(state: RegistryState, inc: Incident, e: Endpoint) -> Row:
    """A row of ``/api/v1/endpoint-incidents``: ``severity`` critical once chainproxy
    calls it Down (failing ≥ 10 min), else warning; ``state`` active/resolved;
    ``reason`` the classification that opened it; ``status``/``classification``
    the endpoint's now."""
    h = health_of(state.health, e)
    kind = vocab.kind(e.kind)
    health = _health_fields(state, h)
    return {
        "id": f"incident-{inc.id}",
        "endpoint_id": e.id,
        "surface_id": e.id,
        "surface_key": None,
        "netuid": e.subnet,
        "layer": vocab.layer(kind),
        "kind": kind,
        "provider": e.provider,
        "operator": None,
        "status": health["status"],
        "classification": vocab.classification(inc.message),
        "observed_at": health["observed_at"],
        "health_source": "probe-derived",
        "health_stale": health["health_stale"],
        "severity": "critical" if inc.severity(state.now) == "Down" else "warning",
        "state": "active" if inc.ongoing else "resolved",
        "reason": inc.message,
        "detected_at": iso(inc.started),
        "last_ok": health["last_ok"],
        "last_checked": health["last_checked"],
        "pool_eligible": pool_eligible(e, h),
        "user_reported": False,
        "source": "probe-derived",
    }
