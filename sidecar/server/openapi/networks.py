"""The document's per-network part: ``GET /api/v1/networks`` and
``/api/v1/networks/{network}`` (``sidecar.registry.networks``)."""

from __future__ import annotations

from sidecar.server.openapi import schema as js
from sidecar.server.openapi.schema import Schema


def _runtime(description: str) -> Schema:
    return js.obj(
        {"spec_name": js.string(), "spec_version": js.integer()},
        description,
    )


def schemas() -> dict[str, Schema]:
    runtime = js.obj(
        {
            "spec_name": js.string("specName of state_getRuntimeVersion"),
            "spec_version": js.integer(desc="specVersion of state_getRuntimeVersion"),
            "since_block": js.integer(
                null=True,
                desc="its first block, when the sidecar saw the upgrade to it; null: it ran"
                " when first seen",
            ),
            "seen_block": js.integer(desc="the highest best block seen on it"),
            "seen_at": js.ISO,
        },
    )
    upgrade = js.obj(
        {
            "from": _runtime("the runtime before"),
            "to": _runtime("the runtime after"),
            "block": js.integer(desc="the first best block seen on the new runtime"),
            "after_block": js.integer(
                null=True,
                desc="the last best block seen on the old runtime: the upgrade is in"
                " (after_block, block], exact when they are consecutive",
            ),
            "at": {**js.ISO, "description": "when the sidecar saw it"},
        },
    )
    return {
        "Network": js.obj(
            {
                "network": js.string(),
                "served": {**js.BOOL, "description": "in proxy.networks"},
                "tip": js.integer(null=True, desc="highest best block of a healthy node"),
                "finalized": js.integer(null=True),
                "runtime": {
                    "oneOf": [runtime, {"type": "null"}],
                    "description": "the runtime the best blocks run, as the head probes of"
                    " healthy, synced nodes read it (state_getRuntimeVersion); null: not yet read",
                },
                "last_upgrade": {
                    "oneOf": [upgrade, {"type": "null"}],
                    "description": "the last runtime upgrade the sidecar saw (kept across"
                    " restarts); null: none",
                },
            },
            "One network of the config: heights, runtime, last runtime upgrade.",
        ),
        "Networks": js.obj({"networks": js.arr(js.ref("Network"))}),
    }


def paths() -> dict[str, Schema]:
    network = js.param("path", "network", js.string(), "a network of the config")
    return {
        "/api/v1/networks": js.get("Every network: heights and runtime", js.ref("Networks")),
        "/api/v1/networks/{network}": js.get(
            "One network: heights and runtime",
            js.ref("Network"),
            parameters=[network],
            errors={"404": "unknown network"},
        ),
    }
