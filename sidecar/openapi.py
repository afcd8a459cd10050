"""The OpenAPI 3.1 document served at ``GET /api/v1/openapi.json`` (pure data).

It describes every public path of the sidecar (the internal ``/api/v1/internal/``
paths used by the addon are not public and are left out). Schemas are JSON
Schema 2020-12 (OpenAPI 3.1), so a client, or a test, can validate answers
with any JSON Schema validator. Objects list every field they have; fields are
not removed or renamed within ``/api/v1``, new ones may be added.

When adding a path to the sidecar, add it here too: a test compares the app's
routes with this document.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

from common.config import KINDS

Schema = dict[str, Any]

STATUS = ("OK", "Degraded", "Unknown")
ENDPOINT_ID_PATTERN = r"^endpoint-srf-[0-9a-f]{16}$"
_ISO = {"type": "string", "format": "date-time", "description": "UTC, e.g. 2026-11-22T00:50:00Z"}


def _ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(props: dict[str, Schema], description: str | None = None) -> Schema:
    out: Schema = {"type": "object", "required": list(props), "properties": props}
    if description:
        out["description"] = description
    return out


def _arr(items: Schema) -> Schema:
    return {"type": "array", "items": items}


def _int(minimum: int | None = 0, *, null: bool = False, desc: str | None = None) -> Schema:
    out: Schema = {"type": ["integer", "null"] if null else "integer"}
    if minimum is not None:
        out["minimum"] = minimum
    if desc:
        out["description"] = desc
    return out


def _str(desc: str | None = None, *, null: bool = False, **kw: Any) -> Schema:
    out: Schema = {"type": ["string", "null"] if null else "string", **kw}
    if desc:
        out["description"] = desc
    return out


_BOOL: Schema = {"type": "boolean"}
_PCT: Schema = {"type": "number", "minimum": 0, "maximum": 100}
_COUNT_PCT = _obj({"count": _int(), "pct": _PCT})


def _schemas() -> dict[str, Schema]:
    endpoint_id = _str("endpoint identifier", pattern=ENDPOINT_ID_PATTERN)
    status = {"type": "string", "enum": list(STATUS)}
    kind = {"type": "string", "enum": list(KINDS)}
    return {
        "Error": _obj(
            {"error": _obj({"code": _int(400), "message": _str()})},
            "Every error answer (4xx/5xx) of the sidecar.",
        ),
        "Healthz": _obj(
            {
                "status": {"type": "string", "enum": ["ok"]},
                "uptime_s": {"type": "number", "minimum": 0},
                "networks": _arr(_str()),
                "endpoints": _int(),
                "probes_run": _int(),
            }
        ),
        "Usage": _obj(
            {
                "window_s": _int(1, desc="604800: the last 7 days"),
                "requests": _int(),
                "p50_ms": _int(null=True, desc="null without requests"),
                "p95_ms": _int(null=True),
                "success": _COUNT_PCT,
                "errors": _COUNT_PCT,
                "failover": _COUNT_PCT,
                "cache_hits": _COUNT_PCT,
                "by_network": {
                    "type": "object",
                    "additionalProperties": _int(),
                    "description": "requests per configured network",
                },
                "endpoints": _arr(
                    _obj(
                        {
                            "endpoint": _str("label <provider>-<network or archive>-rpc[-n]"),
                            "id": endpoint_id,
                            "provider": _str(),
                            "requests": _int(),
                            "share_pct": _PCT,
                            "errors_pct": _PCT,
                            "avg_latency_ms": _int(),
                        }
                    )
                ),
                "updated": {**_ISO, "type": ["string", "null"]},
                "freshness": {"type": "string", "enum": ["fresh", "unknown"]},
            },
            "Proxy usage over the last 7 days; endpoints by requests, descending.",
        ),
        "RegistryTotals": _obj(
            {
                "endpoints_tracked": _int(),
                "rpc_pools": _int(desc="pools listed by /api/v1/pools/rpc"),
                "rpc_pools_proxy_eligible": _int(),
                "archive_capable": _int(),
                "healthy_pct": {**_PCT, "description": "healthy / probed * 100"},
                "healthy": _int(),
                "probed": _int(),
            }
        ),
        "RpcPool": _obj(
            {
                "pool": _str("<network>-rpc | <network>-wss | <network>-archive"),
                "region": _str("the members' common region, or empty"),
                "members": _int(1),
                "archive": _BOOL,
                "proxy_eligible": _BOOL,
            }
        ),
        "EndpointPool": _obj(
            {
                "pool": _str(),
                "kind": {"type": "string", "enum": ["node-rpc", "node-wss", "archive"]},
                "eligible": _int(desc="healthy members"),
                "total": _int(1),
                "best_endpoint": {
                    **endpoint_id,
                    "type": ["string", "null"],
                    "description": "the healthy member with the lowest latency; null when none",
                },
            }
        ),
        "RootEndpoints": _obj(
            {
                "rows": _arr(
                    _obj(
                        {
                            "id": endpoint_id,
                            "provider": _str(),
                            "kind": {"type": "string", "enum": ["node-rpc", "node-wss"]},
                            "classification": _str("live, unknown, or a failure reason"),
                            "status": status,
                            "archive": _BOOL,
                            "latency_ms": _int(null=True, desc="null when unprobed"),
                        }
                    )
                ),
                "summary": _obj(
                    {"total": _int(), "archive_capable": _int(), "ok": _int(), "unknown": _int()}
                ),
            }
        ),
        "CallableEndpoints": _obj(
            {
                "total": _int(),
                "page": _int(1),
                "pages": _int(1),
                "page_size": {"type": "integer", "const": 25},
                "rows": _arr(
                    _obj(
                        {
                            "id": endpoint_id,
                            "subnet": _str("zero-padded, 000 = root", pattern=r"^[0-9]{3,}$"),
                            "kind": kind,
                            "url": _str("node-wss only (with port), else null", null=True),
                            "provider": _str(),
                            "status": status,
                            "latency_ms": _int(null=True, desc="null when status is Unknown"),
                            "probed": _BOOL,
                        }
                    )
                ),
            },
            "Every endpoint, root first then by subnet number, 25 per page.",
        ),
        "Heatmap": _obj(
            {
                "buckets": {
                    "type": "array",
                    "items": {"type": "integer"},
                    "const": [150, 400, 1000],
                    "description": "upper bucket edges, ms (exclusive); bucket 4 = slower or down",
                },
                "rows": _arr(
                    _obj(
                        {
                            "provider": _str(),
                            "cells": {
                                "type": "object",
                                "propertyNames": {"enum": list(KINDS)},
                                "additionalProperties": _ref("HeatCell"),
                            },
                        }
                    )
                ),
            }
        ),
        "HeatCell": _obj(
            {
                "p50_ms": _int(null=True, desc="null when down or not probed yet"),
                "bucket": {
                    "type": ["integer", "null"],
                    "minimum": 1,
                    "maximum": 4,
                    "description": "null only while none of the endpoints is probed",
                },
                "endpoints": _int(1),
            }
        ),
        "Incident": _obj(
            {
                "severity": {"type": "string", "enum": ["Degraded", "Down"]},
                "endpoint": endpoint_id,
                "state": {"type": "string", "enum": ["ongoing", "resolved"]},
                "started": _ISO,
                "ended": {**_ISO, "type": ["string", "null"]},
                "duration": _str("e.g. 2h 05m", pattern=r"^[0-9]+h [0-5][0-9]m$"),
                "message": _str("the failure classification, e.g. dead, timeout, http-503"),
            }
        ),
        "Incidents": _obj(
            {
                "hosts": _int(desc="distinct hosts among the incidents listed"),
                "incidents": _arr(_ref("Incident")),
            },
            "Ongoing incidents and those resolved in the last 7 days, newest first (<= 200).",
        ),
        "IncidentTimeline": _obj(
            {
                "endpoints": _arr(
                    _obj({"endpoint": endpoint_id, "ongoing": _int(), "total": _int()})
                ),
                "hosts": _arr(
                    _obj(
                        {
                            "host": _str(),
                            "ongoing": _int(),
                            "total": _int(),
                            "links": _arr(endpoint_id),
                        }
                    )
                ),
            },
            "Incidents of the last 24 h per endpoint and per host.",
        ),
        "EndpointDetail": _obj(
            {
                "id": endpoint_id,
                "url": _str("the URL with any secret redacted"),
                "provider": _str(),
                "kind": kind,
                "network": _str(),
                "subnet": _str(pattern=r"^[0-9]{3,}$"),
                "archive": _BOOL,
                "region": _str(),
                "notes": _str(),
                "status": status,
                "classification": _str(),
                "probed": _BOOL,
                "latency_ms": _int(null=True),
                "score": {"type": "number", "minimum": 0, "maximum": 1},
                "heights": _obj(
                    {
                        "best": _int(null=True),
                        "finalized": _int(null=True),
                        "tip": _int(null=True),
                        "network_finalized": _int(null=True),
                        "lag": _int(null=True),
                        "synced": _BOOL,
                    }
                ),
                "last_probe_at": {**_ISO, "type": ["string", "null"]},
                "last_ok_at": {**_ISO, "type": ["string", "null"]},
                "probes": _arr(
                    _obj(
                        {
                            "at": _ISO,
                            "kind": {"type": "string", "enum": ["full", "head"]},
                            "classification": _str(),
                            "latency_ms": _int(null=True),
                            "best": _int(null=True),
                            "finalized": _int(null=True),
                            "archive": {"type": ["boolean", "null"]},
                            "detail": _str(),
                        }
                    )
                ),
                "incidents": _arr(_ref("Incident")),
            },
            "One endpoint: registry fields, health, heights, last 20 probes, incidents.",
        ),
    }


def _json(schema: Schema, description: str) -> Schema:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ERROR = _ref("Error")


def _get(
    summary: str,
    schema: Schema,
    *,
    errors: dict[str, str] | None = None,
    parameters: list[Schema] | None = None,
) -> Schema:
    responses = {"200": _json(schema, "OK")}
    for code, why in (errors or {}).items():
        responses[code] = _json(_ERROR, why)
    op: Schema = {"summary": summary, "responses": responses}
    if parameters:
        op["parameters"] = parameters
    return {"get": op}


def _paths() -> dict[str, Schema]:
    return {
        "/healthz": _get("Liveness", _ref("Healthz")),
        "/api/v1/usage": _get(
            "7-day proxy usage summary",
            _ref("Usage"),
            parameters=[
                {
                    "name": "network",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "string"},
                    "description": "one of the configured networks; absent: all",
                }
            ],
            errors={"404": "unknown network", "503": "statistics store unavailable"},
        ),
        "/api/v1/registry/totals": _get("Registry totals", _ref("RegistryTotals")),
        "/api/v1/pools/rpc": _get("Proxy pools", _arr(_ref("RpcPool"))),
        "/api/v1/pools/endpoints": _get("Endpoint pools", _arr(_ref("EndpointPool"))),
        "/api/v1/endpoints/root": _get("Root RPC/WSS endpoints", _ref("RootEndpoints")),
        "/api/v1/endpoints/callable": _get(
            "Callable endpoints, paginated",
            _ref("CallableEndpoints"),
            parameters=[
                {
                    "name": "page",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "integer", "minimum": 1, "default": 1},
                }
            ],
            errors={"400": "page is not a positive integer", "404": "page past the end"},
        ),
        "/api/v1/endpoints/{id}": _get(
            "One endpoint",
            _ref("EndpointDetail"),
            parameters=[
                {
                    "name": "id",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "pattern": ENDPOINT_ID_PATTERN},
                }
            ],
            errors={"404": "unknown endpoint id"},
        ),
        "/api/v1/heatmap": _get("Latency heatmap, provider x kind", _ref("Heatmap")),
        "/api/v1/incidents": _get("Incidents", _ref("Incidents")),
        "/api/v1/incidents/timeline": _get("Incidents of the last 24 h", _ref("IncidentTimeline")),
        "/api/v1/openapi.json": _get(
            "This document", {"type": "object", "description": "OpenAPI 3.1"}
        ),
        "/": {
            "get": {
                "summary": "The dashboard (server-rendered HTML; ?page=N pages the callable list)",
                "parameters": [
                    {
                        "name": "page",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "integer", "minimum": 1},
                    }
                ],
                "responses": {
                    "200": {
                        "description": "HTML page",
                        "content": {"text/html": {"schema": {"type": "string"}}},
                    }
                },
            }
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics",
                "responses": {
                    "200": {
                        "description": "Prometheus text exposition format 0.0.4",
                        "content": {"text/plain": {"schema": {"type": "string"}}},
                    }
                },
            }
        },
    }


@functools.cache
def _document() -> Schema:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "chainproxy sidecar",
            "version": "1.0.0",
            "description": (
                "Read-only JSON API of the chainproxy registry, probes, incidents and usage "
                "statistics. Every path answers GET only (other methods: 405 with the Error "
                "body); times are UTC ISO-8601, latencies integer milliseconds, percentages "
                "0-100. Endpoint URLs are shown with secrets redacted."
            ),
        },
        "servers": [{"url": "/"}],
        "paths": _paths(),
        "components": {"schemas": _schemas()},
    }


def openapi_document() -> Schema:
    """The document (a fresh copy: callers may change it)."""
    return copy.deepcopy(_document())
