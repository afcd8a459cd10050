"""Handlers of the Metagraphed paths, and the middleware that gives those paths
Metagraphed's error envelope and CORS preflight (URLs in ``sidecar.server.routes``).

Each handler reads the registry (``RegistryService``) or the usage store,
builds its document (``sidecar.metagraphed.documents``, ``.usage``), runs the
list engine over the document's collection (``.listing``) and answers through
``.envelope``: the ``{ok, schema_version, data, meta}`` body, ETag/304, CORS.
Every path is served under ``/metagraphed`` too; at the root only where
chainproxy's own API (docs/OPERATIONS.md#dashboard-and-json-api, a contract)
does not already use the path (``sidecar.metagraphed.paths``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from sidecar.metagraphed import documents as docs
from sidecar.metagraphed.envelope import ALLOW, Answer, error, preflight, success
from sidecar.metagraphed.listing import Collection, QueryError, apply, link_header, parse_query
from sidecar.metagraphed.paths import BASE, ROOT_PATHS, is_metagraphed_path
from sidecar.metagraphed.rows import RegistryState, provider_by_slug
from sidecar.metagraphed.usage import hour_rows, rpc_usage
from sidecar.server.app_keys import REGISTRY_KEY, USAGE_KEY
from sidecar.server.openapi.document import row_fields
from sidecar.usage.store import StoreUnavailable

RETRY_AFTER_S = 10


def respond(a: Answer) -> web.Response:
    return web.Response(status=a.status, body=a.body or None, headers=a.headers)


@web.middleware
async def metagraphed_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Metagraphed's paths answer a preflight, and their errors (an unknown path
    under /metagraphed, another method) in Metagraphed's envelope; every other
    path keeps chainproxy's own error body."""
    if not is_metagraphed_path(request.path):
        return await handler(request)
    if request.method == "OPTIONS":
        return respond(preflight(request.headers.get("Access-Control-Request-Headers")))
    try:
        return await handler(request)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        if e.status == 405:
            msg = "Only GET, HEAD, and OPTIONS are supported."
            return respond(error(405, "method_not_allowed", msg, Allow=ALLOW))
        if e.status == 404:
            return respond(error(404, "not_found", "No route matched this path."))
        return respond(error(e.status, "bad_request", e.reason))


def _state(request: web.Request) -> RegistryState:
    reg = request.app[REGISTRY_KEY]
    return RegistryState(reg.config, reg.health, reg.now())


def _pairs(request: web.Request) -> list[tuple[str, str]]:
    return list(request.query.items())


def _invalid(e: QueryError) -> web.Response:
    return respond(error(400, "invalid_query", str(e), meta={"parameter": e.parameter}))


def _listed(request: web.Request, data: dict[str, Any], coll: Collection) -> web.Response:
    """The document with its collection filtered, sorted, paged and projected."""
    try:
        query = parse_query(_pairs(request), coll)
        wanted = query.filters.get("provider")
        if wanted is not None:  # a provider's slug (``/api/v1/providers``) or its name
            name = provider_by_slug(request.app[REGISTRY_KEY].config, wanted)
            if name is not None:
                query = replace(query, filters={**query.filters, "provider": name.lower()})
        rows, pagination = apply(data[coll.key], query, coll.key, row_fields(coll))
    except QueryError as e:
        return _invalid(e)
    meta = {
        "generated_at": data.get("generated_at"),
        "source": "chainproxy",
        "pagination": pagination,
    }
    return respond(
        success(
            {**data, coll.key: rows},
            meta=meta,
            if_none_match=request.headers.get("If-None-Match"),
            link=link_header(str(request.rel_url), pagination),
        )
    )


def _plain(request: web.Request, data: dict[str, Any]) -> web.Response:
    if request.query:
        name = next(iter(request.query))
        return _invalid(QueryError(name, f"{name} is not supported for this route."))
    meta = {"generated_at": data.get("generated_at"), "source": "chainproxy"}
    return respond(success(data, meta=meta, if_none_match=request.headers.get("If-None-Match")))


async def get_health(request: web.Request) -> web.Response:
    return _listed(request, docs.health(_state(request)), docs.HEALTH)


async def get_endpoints(request: web.Request) -> web.Response:
    return _listed(request, docs.endpoints(_state(request)), docs.ENDPOINTS)


async def get_rpc_endpoints(request: web.Request) -> web.Response:
    return _listed(request, docs.rpc_endpoints(_state(request)), docs.RPC_ENDPOINTS)


async def get_pools(request: web.Request) -> web.Response:
    """``/api/v1/rpc/pools`` and ``/api/v1/endpoint-pools`` (one document)."""
    return _listed(request, docs.endpoint_pools(_state(request)), docs.POOLS)


async def get_endpoint_incidents(request: web.Request) -> web.Response:
    incidents = request.app[REGISTRY_KEY].incidents.incidents()
    data = docs.endpoint_incidents(_state(request), incidents)
    return _listed(request, data, docs.ENDPOINT_INCIDENTS)


async def get_downtime(request: web.Request) -> web.Response:
    """Metagraphed's ``/api/v1/incidents`` (under /metagraphed only): 7 or 30 days,
    both within what chainproxy keeps (30 days of resolved incidents)."""
    try:
        window = parse_query(_pairs(request), docs.DOWNTIME).extra.get("window", "7d")
    except QueryError as e:
        return _invalid(e)
    incidents = request.app[REGISTRY_KEY].incidents.incidents()
    data = docs.downtime(_state(request), incidents, int(window[:-1]) * 86_400)
    return _listed(request, data, docs.DOWNTIME)


async def get_providers(request: web.Request) -> web.Response:
    return _listed(request, docs.providers(_state(request)), docs.PROVIDERS)


def _provider(request: web.Request) -> str | None:
    slug = request.match_info["slug"]
    if len(slug) > 200:
        return None
    return provider_by_slug(request.app[REGISTRY_KEY].config, slug)


def _no_provider() -> web.Response:
    return respond(error(404, "not_found", "No provider with this slug in the registry."))


async def get_provider(request: web.Request) -> web.Response:
    name = _provider(request)
    if name is None:
        return _no_provider()
    return _plain(request, docs.provider_detail(_state(request), name))


async def get_provider_endpoints(request: web.Request) -> web.Response:
    name = _provider(request)
    if name is None:
        return _no_provider()
    return _listed(request, docs.provider_endpoints(_state(request), name), docs.PROVIDER_ENDPOINTS)


async def get_rpc_usage(request: web.Request) -> web.Response:
    """``?window=7d`` (the default). chainproxy keeps 7 days: ``30d`` is refused
    rather than answered with 7 days of numbers under a 30-day label."""
    for name, value in request.query.items():
        if name != "window":
            return _invalid(QueryError(name, f"{name} is not supported for this route."))
        if len(request.query.getall("window")) > 1:  # as every list route: never a silent pick
            return _invalid(QueryError("window", "window may only be provided once."))
        if value.lower() != "7d":
            msg = "window must be 7d: chainproxy keeps 7 days of usage statistics."
            return _invalid(QueryError("window", msg))
    svc = request.app[USAGE_KEY]
    try:
        totals, updated = await svc.window()
        hours = hour_rows(await svc.hourly_series())
    except StoreUnavailable as e:
        msg = f"usage statistics unavailable: {e}"
        return respond(error(503, "unavailable", msg, Retry_After=str(RETRY_AFTER_S)))
    data = rpc_usage(totals, hours, svc.config, updated=updated)
    meta = {"source": "chainproxy"}
    return respond(success(data, meta=meta, if_none_match=request.headers.get("If-None-Match")))


def routes() -> list[web.RouteDef]:
    """Every Metagraphed path: under ``/metagraphed``, and at the root when free."""
    table: list[tuple[str, Handler]] = [
        ("/api/v1/health", get_health),
        ("/api/v1/endpoints", get_endpoints),
        ("/api/v1/rpc/endpoints", get_rpc_endpoints),
        ("/api/v1/rpc/pools", get_pools),
        ("/api/v1/endpoint-pools", get_pools),
        ("/api/v1/endpoint-incidents", get_endpoint_incidents),
        ("/api/v1/rpc/usage", get_rpc_usage),
        ("/api/v1/providers", get_providers),
        ("/api/v1/providers/{slug}", get_provider),
        ("/api/v1/providers/{slug}/endpoints", get_provider_endpoints),
        ("/api/v1/incidents", get_downtime),
    ]
    out = [web.get(BASE + path, handler) for path, handler in table]
    out += [
        web.get(path, handler)
        for path, handler in table
        if path in ROOT_PATHS or path.startswith("/api/v1/providers/")
    ]
    return out
