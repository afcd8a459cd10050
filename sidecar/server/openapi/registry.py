"""The document's registry part: totals, pools, the endpoint lists and the
latency heatmap (``sidecar.registry.pools``, ``sidecar.registry.documents``)."""

from __future__ import annotations

from common.config import KINDS
from sidecar.server.openapi import schema as js
from sidecar.server.openapi.schema import Schema


def schemas() -> dict[str, Schema]:
    return {
        "RegistryTotals": js.obj(
            {
                "endpoints_tracked": js.integer(),
                "rpc_pools": js.integer(desc="pools listed by /api/v1/pools/rpc"),
                "rpc_pools_proxy_eligible": js.integer(),
                "archive_capable": js.integer(),
                "healthy_pct": {**js.PCT, "description": "healthy / probed * 100"},
                "healthy": js.integer(),
                "probed": js.integer(),
            }
        ),
        "RpcPool": js.obj(
            {
                "pool": js.string("<network>-rpc | <network>-wss | <network>-archive"),
                "region": js.string("the members' common region, or empty"),
                "members": js.integer(1),
                "archive": js.BOOL,
                "proxy_eligible": {
                    **js.BOOL,
                    "description": "the members serve traffic through the proxy:"
                    " -rpc and -archive its calls, -wss its subscriptions",
                },
            }
        ),
        "EndpointPool": js.obj(
            {
                "pool": js.string(),
                "kind": js.enum("node-rpc", "node-wss", "archive"),
                "eligible": js.integer(desc="healthy members"),
                "total": js.integer(1),
                "best_endpoint": {
                    **js.nullable(js.ENDPOINT_ID, "string"),
                    "description": "the healthy member with the lowest latency; null when none",
                },
            }
        ),
        "RootEndpoints": js.obj(
            {
                "rows": js.arr(
                    js.obj(
                        {
                            "id": js.ENDPOINT_ID,
                            "provider": js.string(),
                            "kind": js.enum("node-rpc", "node-wss"),
                            "classification": js.string("live, unknown, or a failure reason"),
                            "status": js.STATUS_ENUM,
                            "archive": js.BOOL,
                            "horizon": js.ref("StateHorizon"),
                            "latency_ms": js.integer(null=True, desc="null when unprobed"),
                            **js.CAPACITY,
                        }
                    )
                ),
                "summary": js.obj(
                    {
                        "total": js.integer(),
                        "archive_capable": js.integer(),
                        "ok": js.integer(),
                        "unknown": js.integer(),
                    }
                ),
            }
        ),
        "CallableEndpoints": js.obj(
            {
                "total": js.integer(),
                "page": js.integer(1),
                "pages": js.integer(1),
                "page_size": {"type": "integer", "const": 25},
                "rows": js.arr(
                    js.obj(
                        {
                            "id": js.ENDPOINT_ID,
                            "subnet": js.string("zero-padded, 000 = root", pattern=r"^[0-9]{3,}$"),
                            "kind": js.KIND_ENUM,
                            "url": js.string("node-wss only (with port), else null", null=True),
                            "provider": js.string(),
                            "status": js.STATUS_ENUM,
                            "latency_ms": js.integer(null=True, desc="null when status is Unknown"),
                            "probed": js.BOOL,
                            **js.CAPACITY,
                        }
                    )
                ),
            },
            "Every endpoint, root first then by subnet number, 25 per page.",
        ),
        "Heatmap": js.obj(
            {
                "buckets": {
                    "type": "array",
                    "items": {"type": "integer"},
                    "const": [150, 400, 1000],
                    "description": "upper bucket edges, ms (exclusive); bucket 4 = slower or down",
                },
                "rows": js.arr(
                    js.obj(
                        {
                            "provider": js.string(),
                            "cells": {
                                "type": "object",
                                "propertyNames": {"enum": list(KINDS)},
                                "additionalProperties": js.ref("HeatCell"),
                            },
                        }
                    )
                ),
            }
        ),
        "HeatCell": js.obj(
            {
                "p50_ms": js.integer(null=True, desc="null when down or not probed yet"),
                "bucket": {
                    "type": ["integer", "null"],
                    "minimum": 1,
                    "maximum": 4,
                    "description": "null only while none of the endpoints is probed",
                },
                "endpoints": js.integer(1),
            }
        ),
    }


def paths() -> dict[str, Schema]:
    page = js.param("query", "page", {"type": "integer", "minimum": 1, "default": 1})
    return {
        "/api/v1/registry/totals": js.get("Registry totals", js.ref("RegistryTotals")),
        "/api/v1/pools/rpc": js.get("Proxy pools", js.arr(js.ref("RpcPool"))),
        "/api/v1/pools/endpoints": js.get("Endpoint pools", js.arr(js.ref("EndpointPool"))),
        "/api/v1/endpoints/root": js.get("Root RPC/WSS endpoints", js.ref("RootEndpoints")),
        "/api/v1/endpoints/callable": js.get(
            "Callable endpoints, paginated",
            js.ref("CallableEndpoints"),
            parameters=[page],
            errors={"400": "page is not a positive integer", "404": "page past the end"},
        ),
        "/api/v1/heatmap": js.get("Latency heatmap, provider x kind", js.ref("Heatmap")),
    }
