"""The document's usage part: ``GET /api/v1/usage`` (``sidecar.stats.summary``)."""

from __future__ import annotations

from sidecar.openapi.schema import (
    COUNT_PCT,
    ENDPOINT_ID,
    ISO,
    PCT,
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
    row = obj(
        {
            "endpoint": string("label <provider>-<network or archive>-rpc[-n]"),
            "id": ENDPOINT_ID,
            "provider": string(),
            "requests": integer(),
            "share_pct": PCT,
            "errors_pct": PCT,
            "avg_latency_ms": integer(),
        }
    )
    return {
        "Usage": obj(
            {
                "window_s": integer(1, desc="604800: the last 7 days"),
                "requests": integer(),
                "p50_ms": integer(null=True, desc="null without requests"),
                "p95_ms": integer(null=True),
                "success": COUNT_PCT,
                "errors": COUNT_PCT,
                "failover": COUNT_PCT,
                "cache_hits": COUNT_PCT,
                "by_network": {
                    "type": "object",
                    "additionalProperties": integer(),
                    "description": "requests per configured network",
                },
                "endpoints": arr(row),
                "updated": nullable(ISO, "string"),
                "freshness": enum("fresh", "unknown"),
            },
            "Proxy usage over the last 7 days; endpoints by requests, descending.",
        ),
    }


def paths() -> dict[str, Schema]:
    network = param(
        "query",
        "network",
        {"type": "string"},
        "one of the configured networks; absent: all",
    )
    return {
        "/api/v1/usage": get(
            "7-day proxy usage summary",
            ref("Usage"),
            parameters=[network],
            errors={"404": "unknown network", "503": "statistics store unavailable"},
        ),
    }
