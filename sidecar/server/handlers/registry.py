"""Handlers of the registry's paths: the public documents, one endpoint, and
the addon's routing snapshot. Each parses its input, builds a pure document
(``sidecar.registry.documents``, ``sidecar.registry.endpoint_detail``,
``sidecar.registry.routing_snapshot``) and answers JSON; the URL of each is in
``sidecar.server.routes``.

The endpoint lists and one endpoint also carry what the proxies report about
each node (``upstream_live``: back-offs, learned rates). Most other registry
paths take no input at all: ``serves_health_doc`` and
``serves_incident_doc`` turn a document function into its handler, so the
route table names the document each path serves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from common.config import Config
from sidecar.incidents.tracker import Incident
from sidecar.registry.documents import PageError, callable_endpoints, parse_page, root_endpoints
from sidecar.registry.endpoint_detail import endpoint_detail
from sidecar.registry.pools import HealthMap
from sidecar.registry.routing_snapshot import snapshot
from sidecar.registry.upstream import NO_REPORTS, UpstreamLive
from sidecar.server.app_keys import CLOCK_KEY, CONFIG_KEY, PROBER_KEY, REGISTRY_KEY, USAGE_KEY
from sidecar.server.json_errors import json_error

HealthDoc = Callable[[Config, HealthMap], Any]
IncidentDoc = Callable[[Config, Sequence[Incident], float], Any]


def upstream_live(app: web.Application) -> UpstreamLive:
    """The proxies' live reports on their nodes (back-offs, learned rates), as the
    usage service accumulated them from the batches' gauges; none without it."""
    usage = app.get(USAGE_KEY)
    if usage is None:
        return NO_REPORTS
    g = usage.proxy_metrics.gauges()
    return UpstreamLive(backoff_until=g.upstream_backoff_until, learned_rps=g.upstream_learned_rps)


def serves_health_doc(doc: HealthDoc) -> Handler:
    """The handler of a path that answers ``doc(config, health)``."""

    async def handler(request: web.Request) -> web.StreamResponse:
        reg = request.app[REGISTRY_KEY]
        return web.json_response(doc(reg.config, reg.health))

    return handler


def serves_incident_doc(doc: IncidentDoc) -> Handler:
    """The handler of a path that answers ``doc(config, incidents, now)``."""

    async def handler(request: web.Request) -> web.StreamResponse:
        reg = request.app[REGISTRY_KEY]
        return web.json_response(doc(reg.config, reg.incidents.incidents(), reg.now()))

    return handler


async def get_root(request: web.Request) -> web.Response:
    reg = request.app[REGISTRY_KEY]
    return web.json_response(root_endpoints(reg.config, reg.health, upstream_live(request.app)))


async def get_callable(request: web.Request) -> web.Response:
    """``?page=N``: not a positive integer or given twice → 400, past the end → 404."""
    reg = request.app[REGISTRY_KEY]
    values = request.query.getall("page", [])
    if len(values) > 1:
        return json_error(400, "give page once")
    try:
        page = parse_page(values[0] if values else None)
        doc = callable_endpoints(reg.config, reg.health, page, live=upstream_live(request.app))
    except PageError as e:
        return json_error(e.status, str(e))
    return web.json_response(doc)


async def get_endpoint(request: web.Request) -> web.Response:
    config = request.app[CONFIG_KEY]
    endpoint = config.endpoint_by_id(request.match_info["id"])
    if endpoint is None:
        return json_error(404, "unknown endpoint id")
    prober = request.app[PROBER_KEY]
    probes = reversed(prober.recent.get(endpoint.id, ()))  # newest first
    incidents = request.app[REGISTRY_KEY].endpoint_incidents(endpoint.id)
    live = upstream_live(request.app)
    doc = endpoint_detail(config, endpoint, prober.health, probes, incidents, live)
    return web.json_response(doc)


async def get_routes(request: web.Request) -> web.Response:
    """The addon's routing snapshot of one network (an unknown one → 404)."""
    config = request.app[CONFIG_KEY]
    network = request.match_info["network"]
    if network not in config.networks:
        return json_error(404, f"unknown network {network!r}")
    doc = snapshot(
        network,
        config.endpoints,
        request.app[PROBER_KEY].health,
        max_lag=config.networks[network].max_lag_blocks,
        now=request.app[CLOCK_KEY](),
    )
    return web.json_response(doc)
