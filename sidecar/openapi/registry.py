"""The document's registry part: totals, pools, the endpoint lists and the
latency heatmap (``sidecar.pools``, ``sidecar.views``)."""

from __future__ import annotations

from common.config import KINDS
from sidecar.openapi.schema import (
    BOOL,
    ENDPOINT_ID,
    KIND_ENUM,
    PCT,
    STATUS_ENUM,
    Schema,
    arr,
    enum,
    get,
    integer,
    nullable,
    obj,
    param,
    ref,
    string,
)


def schemas() -> dict[str, Schema]:
    return {
        "RegistryTotals": obj(
            {
                "endpoints_tracked": integer(),
                "rpc_pools": integer(desc="pools listed by /api/v1/pools/rpc"),
                "rpc_pools_proxy_eligible": integer(),
                "archive_capable": integer(),
                "healthy_pct": {**PCT, "description": "healthy / probed * 100"},
                "healthy": integer(),
                "probed": integer(),
            }
        ),
        "RpcPool": obj(
            {
                "pool": string("<network>-rpc | <network>-wss | <network>-archive"),
                "region": string("the members' common region, or empty"),
                "members": integer(1),
                "archive": BOOL,
                "proxy_eligible": BOOL,
            }
        ),
        "EndpointPool": obj(
            {
                "pool": string(),
                "kind": enum("node-rpc", "node-wss", "archive"),
                "eligible": integer(desc="healthy members"),
                "total": integer(1),
                "best_endpoint": {
                    **nullable(ENDPOINT_ID, "string"),
                    "description": "the healthy member with the lowest latency; null when none",
                },
            }
        ),
        "RootEndpoints": obj(
            {
                "rows": arr(
                    obj(
                        {
                            "id": ENDPOINT_ID,
                            "provider": string(),
                            "kind": enum("node-rpc", "node-wss"),
                            "classification": string("live, unknown, or a failure reason"),
                            "status": STATUS_ENUM,
                            "archive": BOOL,
                            "latency_ms": integer(null=True, desc="null when unprobed"),
                        }
                    )
                ),
                "summary": obj(
                    {
                        "total": integer(),
                        "archive_capable": integer(),
                        "ok": integer(),
                        "unknown": integer(),
                    }
                ),
            }
        ),
        "CallableEndpoints": obj(
            {
                "total": integer(),
                "page": integer(1),
                "pages": integer(1),
                "page_size": {"type": "integer", "const": 25},
                "rows": arr(
                    obj(
                        {
                            "id": ENDPOINT_ID,
                            "subnet": string("zero-padded, 000 = root", pattern=r"^[0-9]{3,}$"),
                            "kind": KIND_ENUM,
                            "url": string("node-wss only (with port), else null", null=True),
                            "provider": string(),
                            "status": STATUS_ENUM,
                            "latency_ms": integer(null=True, desc="null when status is Unknown"),
                            "probed": BOOL,
                        }
                    )
                ),
            },
            "Every endpoint, root first then by subnet number, 25 per page.",
        ),
        "Heatmap": obj(
            {
                "buckets": {
                    "type": "array",
                    "items": {"type": "integer"},
                    "const": [150, 400, 1000],
                    "description": "upper bucket edges, ms (exclusive); bucket 4 = slower or down",
                },
                "rows": arr(
                    obj(
                        {
                            "provider": string(),
                            "cells": {
                                "type": "object",
                                "propertyNames": {"enum": list(KINDS)},
                                "additionalProperties": ref("HeatCell"),
                            },
                        }
                    )
                ),
            }
        ),
        "HeatCell": obj(
            {
                "p50_ms": integer(null=True, desc="null when down or not probed yet"),
                "bucket": {
                    "type": ["integer", "null"],
                    "minimum": 1,
                    "maximum": 4,
                    "description": "null only while none of the endpoints is probed",
                },
                "endpoints": integer(1),
            }
        ),
    }


def paths() -> dict[str, Schema]:
    page = param("query", "page", {"type": "integer", "minimum": 1, "default": 1})
    return {
        "/api/v1/registry/totals": get("Registry totals", ref("RegistryTotals")),
        "/api/v1/pools/rpc": get("Proxy pools", arr(ref("RpcPool"))),
        "/api/v1/pools/endpoints": get("Endpoint pools", arr(ref("EndpointPool"))),
        "/api/v1/endpoints/root": get("Root RPC/WSS endpoints", ref("RootEndpoints")),
        "/api/v1/endpoints/callable": get(
            "Callable endpoints, paginated",
            ref("CallableEndpoints"),
            parameters=[page],
            errors={"400": "page is not a positive integer", "404": "page past the end"},
        ),
        "/api/v1/heatmap": get("Latency heatmap, provider x kind", ref("Heatmap")),
    }
