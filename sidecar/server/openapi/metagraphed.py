"""The document's Metagraphed part: the paths that answer in Metagraphed's shapes
(``sidecar.metagraphed``), under ``/metagraphed/api/v1/…`` and, where chainproxy's
own API leaves the path free, at ``/api/v1/…``. Their bodies are Metagraphed's
envelope; errors are its error envelope (``MgError``), not chainproxy's ``Error``.
Fields chainproxy cannot know are null (docs/METAGRAPHED.md)."""

from __future__ import annotations

from sidecar.metagraphed import documents as docs
from sidecar.metagraphed import vocab
from sidecar.metagraphed.listing import Collection
from sidecar.metagraphed.paths import BASE, ROOT_PATHS
from sidecar.metagraphed.rows import POOL_HEALTH_FIELDS
from sidecar.server.openapi import schema as js
from sidecar.server.openapi.schema import Schema

_STR_N = js.string(null=True)
_INT_N = js.integer(null=True)
_BOOL_N: Schema = {"type": ["boolean", "null"]}
_ISO_N: Schema = {**js.nullable(js.ISO, "string")}
_COUNTS: Schema = {"type": "object", "additionalProperties": js.integer()}
_STATUS = js.enum(*vocab.STATUSES)


def _opt(props: dict[str, Schema], required: list[str]) -> Schema:
    return {"type": "object", "required": required, "properties": props}


_HEALTH_FIELDS: dict[str, Schema] = {
    "status": _STATUS,
    "classification": js.enum(*vocab.CLASSIFICATIONS),
    "latency_ms": _INT_N,
    "latest_block": _INT_N,
    "observed_at": _ISO_N,
    "health_source": js.enum("probe-derived", "missing-probe"),
    "health_stale": js.BOOL,
    "last_ok": _ISO_N,
    "last_checked": _ISO_N,
    "error": js.string("chainproxy's own classification while the last probe failed", null=True),
}
_ROW_BASE: dict[str, Schema] = {
    "id": js.ENDPOINT_ID,
    "netuid": js.integer(),
    "chain": js.enum("bittensor"),
    "network": js.string(),
    "layer": js.enum(*vocab.LAYERS),
    "kind": js.enum(*vocab.ENDPOINT_KINDS),
    "url": js.string("secrets redacted"),
    "provider": js.string(),
    "publication_state": js.enum("pool-eligible", "monitored"),
    "pool_eligible": js.BOOL,
    "score": js.integer(desc="share of the last 20 probes that succeeded, 0-100"),
    "archive_support": _BOOL_N,
}
_REASONS = js.arr(js.string())


def _summary(extra: dict[str, Schema]) -> Schema:
    return js.obj({"endpoint_count": js.integer(), **extra})


_ENDPOINT_SUMMARY = _summary(
    {
        "monitored_count": js.integer(),
        "pool_eligible_count": js.integer(),
        **{f"by_{k}": _COUNTS for k in ("kind", "layer", "provider", "publication_state")},
        "by_status": _COUNTS,
    }
)


def schemas() -> dict[str, Schema]:
    endpoint = js.obj(
        {
            **_ROW_BASE,
            "surface_id": js.ENDPOINT_ID,
            "surface_key": {"type": "null"},
            "operator": {"type": "null"},
            "auth_required": _BOOL_N,
            "public_safe": {"type": "null"},
            "monitoring_policy": js.obj(
                {
                    "enabled": js.BOOL,
                    "method": {"type": "null"},
                    "expect": {"type": "null"},
                    "source": js.string(),
                    "timeout_ms": js.integer(),
                }
            ),
            "monitoring_status": js.enum("monitored"),
            "pool_eligibility_reasons": _REASONS,
            **_HEALTH_FIELDS,
        },
        "An endpoint resource (``fields=`` projects rows to the fields named).",
    )
    member = js.obj(
        {
            **{k: _ROW_BASE[k] for k in ("id", "kind", "layer", "url", "provider", "score")},
            "surface_id": js.ENDPOINT_ID,
            "archive_support": _BOOL_N,
            "pool_eligible": js.BOOL,
            "pool_eligibility_reasons": _REASONS,
            **{k: _HEALTH_FIELDS[k] for k in POOL_HEALTH_FIELDS},
        }
    )
    provider = js.obj(
        {
            "id": js.string(pattern="^[a-z0-9-]+$"),
            "slug": js.string("the same as id (the PyPI client's model reads slug)"),
            "name": js.string(),
            "kind": {"type": "null"},
            "authority": {"type": "null"},
            "website_url": {"type": "null"},
            "netuids": js.arr(js.integer()),
            "endpoint_count": js.integer(),
            "surface_count": js.integer(),
            "schema_version": {"const": 1},
        }
    )
    base = {"schema_version": {"const": 1}, "contract_version": js.string(), "generated_at": js.ISO}
    severity = js.enum(*vocab.SEVERITIES)
    incident = js.obj(
        {
            "id": js.string(pattern="^incident-[0-9]+$"),
            "endpoint_id": js.ENDPOINT_ID,
            "surface_id": js.ENDPOINT_ID,
            "surface_key": {"type": "null"},
            "netuid": js.integer(),
            "layer": js.enum(*vocab.LAYERS),
            "kind": js.enum(*vocab.ENDPOINT_KINDS),
            "provider": js.string(),
            "operator": {"type": "null"},
            "status": _STATUS,
            "classification": js.enum(*vocab.CLASSIFICATIONS),
            "observed_at": _ISO_N,
            "health_source": js.enum("probe-derived"),
            "health_stale": js.BOOL,
            "severity": severity,
            "state": js.enum(*vocab.INCIDENT_STATES),
            "reason": js.string("the classification that opened it"),
            "detected_at": js.ISO,
            "last_ok": _ISO_N,
            "last_checked": _ISO_N,
            "pool_eligible": js.BOOL,
            "user_reported": js.BOOL,
            "source": js.enum("probe-derived"),
        }
    )

    return {
        "MgError": js.obj(
            {
                "ok": {"const": False},
                "schema_version": {"const": 1},
                "data": {"type": "null"},
                "error": js.obj(
                    {"code": js.string("e.g. not_found, invalid_query"), "message": js.string()}
                ),
                "meta": _opt(
                    {"contract_version": js.string(), "parameter": js.string()},
                    ["contract_version"],
                ),
            },
            "Every error answer of a Metagraphed path.",
        ),
        "MgMeta": _opt(
            {
                "contract_version": js.string(),
                "generated_at": _ISO_N,
                "source": js.string(),
                "pagination": js.obj(
                    {
                        "collection": js.string(),
                        "total": js.integer(),
                        "returned": js.integer(),
                        "limit": js.integer(),
                        "cursor": js.integer(),
                        "next_cursor": _INT_N,
                        "sort": _STR_N,
                        "order": js.enum("asc", "desc"),
                    }
                ),
            },
            ["contract_version"],
        ),
        "MgEndpoint": endpoint,
        "MgEndpoints": js.obj(
            {
                **base,
                "source": js.string(),
                "notes": js.string(),
                "summary": _ENDPOINT_SUMMARY,
                "endpoints": js.arr(js.ref("MgEndpoint")),
            }
        ),
        "MgRpcEndpoints": js.obj(
            {
                **base,
                "source": js.string(),
                "summary": _summary(
                    {
                        "by_kind": _COUNTS,
                        "by_provider": _COUNTS,
                        "by_status": _COUNTS,
                        "archive_supported_count": js.integer(),
                    }
                ),
                "endpoints": js.arr(js.obj({**_ROW_BASE, **_HEALTH_FIELDS})),
            }
        ),
        "MgPools": js.obj(
            {
                **base,
                "source": js.string(),
                "notes": js.string(),
                "pools": js.arr(
                    js.obj(
                        {
                            "id": js.string("<network>-rpc, -wss or -archive"),
                            "kind": js.enum(*vocab.POOL_KINDS),
                            "endpoint_count": js.integer(),
                            "eligible_count": js.integer(),
                            "best_endpoint_id": {**js.ENDPOINT_ID, "type": ["string", "null"]},
                            "endpoints": js.arr(member),
                        }
                    )
                ),
            }
        ),
        "MgEndpointIncidents": js.obj(
            {
                **base,
                "source": js.string(),
                "summary": js.obj(
                    {
                        "incident_count": js.integer(),
                        "active_count": js.integer(),
                        **{
                            f"by_{k}": _COUNTS
                            for k in ("kind", "layer", "provider", "severity", "status")
                        },
                    }
                ),
                "incidents": js.arr(incident),
            }
        ),
        "MgProvider": provider,
        "MgProviders": js.obj({**base, "providers": js.arr(js.ref("MgProvider"))}),
        "MgProviderDetail": js.obj(
            {**base, "provider": js.ref("MgProvider"), "endpoint_summary": _ENDPOINT_SUMMARY}
        ),
        "MgProviderEndpoints": js.obj(
            {
                **base,
                "provider": js.obj({"id": js.string(), "name": js.string()}),
                "summary": _ENDPOINT_SUMMARY,
                "endpoints": js.arr(js.ref("MgEndpoint")),
            }
        ),
    }


def _envelope(data: str) -> Schema:
    return js.obj(
        {
            "ok": {"const": True},
            "schema_version": {"const": 1},
            "data": js.ref(data),
            "meta": js.ref("MgMeta"),
        }
    )


def _params(coll: Collection | None, extra: tuple[str, ...] = ()) -> list[Schema]:
    if coll is None:
        return [js.param("query", n, js.string()) for n in extra]
    out = []
    for name, f in coll.filters.items():
        s = js.enum(*f.values) if f.type == "enum" else js.string()
        if f.type == "int":
            s = {"type": "integer", "minimum": 0, "maximum": f.maximum}
        out.append(js.param("query", name, s))
    for r in coll.ranges:
        out += [js.param("query", f"{b}_{r}", {"type": "number"}) for b in ("min", "max")]
    for name, values in coll.extra.items():
        out.append(js.param("query", name, js.enum(*values)))
    out += [
        js.param("query", "fields", js.string("comma-separated field names")),
        js.param("query", "limit", {"type": "integer", "minimum": 1, "maximum": 1000}),
        js.param("query", "cursor", {"type": "integer", "minimum": 0}),
        js.param("query", "sort", js.enum(*coll.sort)),
        js.param("query", "order", js.enum("asc", "desc")),
    ]
    return out


OPS: tuple[tuple[str, str, str, Collection | None], ...] = (
    ("/api/v1/health", "Health per subnet (Metagraphed)", "MgHealth", docs.HEALTH),
    ("/api/v1/endpoints", "Endpoint resources (Metagraphed)", "MgEndpoints", docs.ENDPOINTS),
    ("/api/v1/rpc/endpoints", "Node endpoints (Metagraphed)", "MgRpcEndpoints", docs.RPC_ENDPOINTS),
    ("/api/v1/rpc/pools", "Pools (Metagraphed)", "MgPools", docs.POOLS),
    ("/api/v1/endpoint-pools", "Pools (Metagraphed)", "MgPools", docs.POOLS),
    (
        "/api/v1/endpoint-incidents",
        "Incidents (Metagraphed)",
        "MgEndpointIncidents",
        docs.ENDPOINT_INCIDENTS,
    ),
    ("/api/v1/rpc/usage", "7-day proxy usage (Metagraphed)", "MgRpcUsage", None),
    ("/api/v1/providers", "Providers (Metagraphed)", "MgProviders", docs.PROVIDERS),
    ("/api/v1/providers/{slug}", "One provider (Metagraphed)", "MgProviderDetail", None),
    (
        "/api/v1/providers/{slug}/endpoints",
        "A provider's endpoints (Metagraphed)",
        "MgProviderEndpoints",
        docs.PROVIDER_ENDPOINTS,
    ),
    (
        "/api/v1/incidents",
        "Downtime per endpoint (Metagraphed's /api/v1/incidents)",
        "MgDowntime",
        docs.DOWNTIME,
    ),
)


def _op(summary: str, data: str, coll: Collection | None, path: str) -> Schema:
    err = js.ref("MgError")
    params = _params(coll, ("window",) if path.endswith("/rpc/usage") else ())
    if "{slug}" in path:
        params.insert(0, js.param("path", "slug", js.string(pattern="^[a-z0-9-]+$")))
    return {
        "get": {
            "summary": summary,
            "parameters": params,
            "responses": {
                "200": js.content(_envelope(data), "OK (ETag; 304 when If-None-Match names it)"),
                "304": {"description": "Not modified"},
                "400": js.content(err, "invalid_query: a parameter the path does not take"),
                "404": js.content(err, "not_found"),
                **(
                    {"503": js.content(err, "unavailable: the usage store cannot be read")}
                    if path.endswith("/rpc/usage")
                    else {}
                ),
            },
        }
    }


def paths() -> dict[str, Schema]:
    out = {}
    for path, summary, data, coll in OPS:
        op = _op(summary, data, coll, path)
        out[BASE + path] = op
        if path in ROOT_PATHS or path.startswith("/api/v1/providers/"):
            out[path] = op
    return out
