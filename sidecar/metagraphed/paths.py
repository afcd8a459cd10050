"""Where Metagraphed's API is served: every path under ``BASE``, and at the
root where chainproxy's own API (docs/OPERATIONS.md#dashboard-and-json-api, a
contract) leaves the path free
(``ROOT_PATHS`` and ``/api/v1/providers/…``). Shared by the handlers, the app's
error middleware and the OpenAPI document."""

from __future__ import annotations

BASE = "/metagraphed"
# Paths chainproxy's own API leaves free: served at the root as well as under BASE.
ROOT_PATHS = (
    "/api/v1/health",
    "/api/v1/endpoints",
    "/api/v1/rpc/endpoints",
    "/api/v1/rpc/pools",
    "/api/v1/endpoint-pools",
    "/api/v1/endpoint-incidents",
    "/api/v1/rpc/usage",
    "/api/v1/providers",
)


def is_metagraphed_path(path: str) -> bool:
    return (
        path == BASE
        or path.startswith(BASE + "/")
        or path in ROOT_PATHS
        or path.startswith("/api/v1/providers/")
    )
