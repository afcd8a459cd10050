"""Every URL of the sidecar, in one table: method, path, handler (the handlers
are in ``sidecar.server.handlers``).

The public JSON API (``/api/v1/…``) is a contract
(docs/OPERATIONS.md#dashboard-and-json-api) and each of its
paths is also described in ``sidecar.server.openapi`` (a test compares the two);
``/api/v1/internal/…`` is the addon's, behind the bearer token (the app's
``internal_token`` middleware). Every path answers GET (and HEAD) only, but
the usage ingest: another method is a 405 JSON error.

Plain paths such as ``/api/v1/endpoints/root`` win over the pattern
``/api/v1/endpoints/{id}`` whatever the order (aiohttp looks the full path up
first); they are listed first anyway, for the reader.

Metagraphed's API (``sidecar.metagraphed``, its handlers in
``sidecar.server.handlers.metagraphed``, docs/METAGRAPHED.md) is served under
``/metagraphed/api/v1/…``, and at ``/api/v1/…`` where chainproxy's own API does
not already use the path (its ``/api/v1/incidents`` stays chainproxy's).
"""

from __future__ import annotations

from aiohttp import web

from sidecar.registry import documents
from sidecar.server.handlers import metagraphed
from sidecar.server.handlers.dashboard import dashboard
from sidecar.server.handlers.networks import get_network, get_networks
from sidecar.server.handlers.ops import get_metrics, get_openapi, healthz
from sidecar.server.handlers.registry import (
    get_callable,
    get_endpoint,
    get_root,
    get_routes,
    serves_health_doc,
    serves_incident_doc,
)
from sidecar.server.handlers.usage import get_usage, post_usage

ROUTES: tuple[web.RouteDef, ...] = (
    web.get("/", dashboard),
    web.get("/healthz", healthz),
    web.get("/metrics", get_metrics),
    web.get("/api/v1/openapi.json", get_openapi),
    web.get("/api/v1/usage", get_usage),
    web.get("/api/v1/registry/totals", serves_health_doc(documents.registry_totals)),
    web.get("/api/v1/pools/rpc", serves_health_doc(documents.proxy_pools)),
    web.get("/api/v1/pools/endpoints", serves_health_doc(documents.endpoint_pools)),
    web.get("/api/v1/endpoints/root", get_root),
    web.get("/api/v1/endpoints/callable", get_callable),
    web.get("/api/v1/endpoints/{id}", get_endpoint),
    web.get("/api/v1/heatmap", serves_health_doc(documents.heatmap)),
    web.get("/api/v1/incidents", serves_incident_doc(documents.incident_list)),
    web.get("/api/v1/incidents/timeline", serves_incident_doc(documents.incident_timeline)),
    web.get("/api/v1/networks", get_networks),
    web.get("/api/v1/networks/{network}", get_network),
    # Metagraphed's shapes (their own list: /metagraphed/…, and the free root paths):
    *metagraphed.routes(),
    # The addon's (bearer token when one is configured):
    web.get("/api/v1/internal/routes/{network}", get_routes),
    web.post("/api/v1/internal/usage", post_usage),
)
