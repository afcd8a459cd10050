"""The document's usage part: ``GET /api/v1/usage`` (``sidecar.usage.stats.summary``)."""

from __future__ import annotations

from sidecar.server.openapi import schema as js
from sidecar.server.openapi.schema import Schema


def schemas() -> dict[str, Schema]:
    row = js.obj(
        {
            "endpoint": js.string("label <provider>-<network or archive>-rpc[-n]"),
            "id": js.ENDPOINT_ID,
            "provider": js.string(),
            "requests": js.integer(),
            "share_pct": js.PCT,
            "errors_pct": js.PCT,
            "avg_latency_ms": js.integer(),
        }
    )
    method = js.obj(
        {
            "method": js.string(),
            "requests": js.integer(),
            "units": js.integer(desc="quota units its calls were charged (answer bytes included)"),
            "units_pct": js.PCT,
        }
    )
    return {
        "Usage": js.obj(
            {
                "window_s": js.integer(1, desc="604800: the last 7 days"),
                "requests": js.integer(),
                "p50_ms": js.integer(null=True, desc="null without requests"),
                "p95_ms": js.integer(null=True),
                "success": js.COUNT_PCT,
                "errors": js.COUNT_PCT,
                "failover": js.COUNT_PCT,
                "cache_hits": js.COUNT_PCT,
                "by_network": {
                    "type": "object",
                    "additionalProperties": js.integer(),
                    "description": "requests per configured network",
                },
                "endpoints": js.arr(row),
                "methods": js.arr(method),
                "updated": js.nullable(js.ISO, "string"),
                "freshness": js.enum("fresh", "unknown"),
            },
            "Proxy usage over the last 7 days; endpoints by requests, descending; the ten"
            " methods that cost the most quota units (whole hours), descending.",
        ),
    }


def paths() -> dict[str, Schema]:
    network = js.param(
        "query",
        "network",
        {"type": "string"},
        "one of the configured networks, given once; absent: all",
    )
    return {
        "/api/v1/usage": js.get(
            "7-day proxy usage summary",
            js.ref("Usage"),
            parameters=[network],
            errors={
                "400": "network given more than once",
                "404": "unknown network",
                "503": "statistics store unavailable",
            },
        ),
    }
