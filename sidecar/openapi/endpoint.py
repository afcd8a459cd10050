"""The document's part for one endpoint: ``GET /api/v1/endpoints/{id}``
(``sidecar.endpoint_view``)."""

from __future__ import annotations

from sidecar.openapi.schema import (
    BOOL,
    ENDPOINT_ID,
    ENDPOINT_ID_PATTERN,
    ISO,
    KIND_ENUM,
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
    heights = obj(
        {
            "best": integer(null=True),
            "finalized": integer(null=True),
            "tip": integer(null=True),
            "network_finalized": integer(null=True),
            "lag": integer(null=True),
            "synced": BOOL,
        }
    )
    probe = obj(
        {
            "at": ISO,
            "kind": enum("full", "head"),
            "classification": string(),
            "latency_ms": integer(null=True),
            "best": integer(null=True),
            "finalized": integer(null=True),
            "archive": {"type": ["boolean", "null"]},
            "detail": string(),
        }
    )
    return {
        "EndpointDetail": obj(
            {
                "id": ENDPOINT_ID,
                "url": string("the URL with any secret redacted"),
                "provider": string(),
                "kind": KIND_ENUM,
                "network": string(),
                "subnet": string(pattern=r"^[0-9]{3,}$"),
                "archive": BOOL,
                "region": string(),
                "notes": string(),
                "status": STATUS_ENUM,
                "classification": string(),
                "probed": BOOL,
                "latency_ms": integer(null=True),
                "score": {"type": "number", "minimum": 0, "maximum": 1},
                "heights": heights,
                "last_probe_at": nullable(ISO, "string"),
                "last_ok_at": nullable(ISO, "string"),
                "probes": arr(probe),
                "incidents": arr(ref("Incident")),
            },
            "One endpoint: registry fields, health, heights, last 20 probes, incidents.",
        ),
    }


def paths() -> dict[str, Schema]:
    endpoint_id = param("path", "id", {"type": "string", "pattern": ENDPOINT_ID_PATTERN})
    return {
        "/api/v1/endpoints/{id}": get(
            "One endpoint",
            ref("EndpointDetail"),
            parameters=[endpoint_id],
            errors={"404": "unknown endpoint id"},
        ),
    }
