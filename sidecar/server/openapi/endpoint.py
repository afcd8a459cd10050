"""The document's part for one endpoint: ``GET /api/v1/endpoints/{id}``
(``sidecar.registry.endpoint_detail``)."""

from __future__ import annotations

from sidecar.server.openapi import schema as js
from sidecar.server.openapi.schema import Schema


def schemas() -> dict[str, Schema]:
    heights = js.obj(
        {
            "best": js.integer(null=True),
            "finalized": js.integer(null=True),
            "tip": js.integer(null=True),
            "network_finalized": js.integer(null=True),
            "lag": js.integer(null=True),
            "synced": js.BOOL,
        }
    )
    probe = js.obj(
        {
            "at": js.ISO,
            "kind": js.enum("full", "head"),
            "classification": js.string(),
            "latency_ms": js.integer(null=True),
            "best": js.integer(null=True),
            "finalized": js.integer(null=True),
            "archive": {"type": ["boolean", "null"]},
            "detail": js.string(),
        }
    )
    return {
        "StateHorizon": js.obj(
            {
                "earliest": js.integer(
                    null=True,
                    desc="the earliest block whose state the node is known to hold"
                    " (0: an archive); null until measured",
                ),
                "lost": js.integer(null=True, desc="the latest block known to be without state"),
                "keeps": js.integer(
                    1, null=True, desc="it keeps the state of its last K blocks (pruned)"
                ),
                "model": js.enum("archive", "window", "fixed", "unknown"),
                "exact": {**js.BOOL, "description": "the model and its edge known to the block"},
                "rounds": js.integer(desc="rounds of state checks so far"),
            },
            "How far back a node's state goes, measured by the probes' state checks.",
        ),
        "EndpointDetail": js.obj(
            {
                "id": js.ENDPOINT_ID,
                "url": js.string("the URL with any secret redacted"),
                "provider": js.string(),
                "kind": js.KIND_ENUM,
                "network": js.string(),
                "subnet": js.string(pattern=r"^[0-9]{3,}$"),
                "archive": js.BOOL,
                "horizon": js.ref("StateHorizon"),
                "region": js.string(),
                "notes": js.string(),
                "status": js.STATUS_ENUM,
                "classification": js.string(),
                "probed": js.BOOL,
                "latency_ms": js.integer(null=True),
                "score": {"type": "number", "minimum": 0, "maximum": 1},
                "heights": heights,
                "last_probe_at": js.nullable(js.ISO, "string"),
                "last_ok_at": js.nullable(js.ISO, "string"),
                **js.CAPACITY,
                "probes": js.arr(probe),
                "incidents": js.arr(js.ref("Incident")),
            },
            "One endpoint: registry fields, health, heights, last 20 probes, incidents.",
        ),
    }


def paths() -> dict[str, Schema]:
    endpoint_id = js.param("path", "id", {"type": "string", "pattern": js.ENDPOINT_ID_PATTERN})
    return {
        "/api/v1/endpoints/{id}": js.get(
            "One endpoint",
            js.ref("EndpointDetail"),
            parameters=[endpoint_id],
            errors={"404": "unknown endpoint id"},
        ),
    }
