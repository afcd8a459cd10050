"""The dashboard at ``/``: one server-rendered HTML page (Jinja2), readable
without JavaScript, refreshed by a meta tag. It calls the same view functions
as the JSON API, so the page and ``/api/v1/…`` never disagree. ``?network=``
narrows the page to one network (the registry views see only its endpoints;
the usage figures are the API's ``?network=``); ``?page=`` is the callable
list's page. (URL in ``sidecar.server.routes``; the pure helpers in
``sidecar.dashboard.view``, the pictures' numbers in ``sidecar.dashboard.chart``
and ``sidecar.dashboard.pictures``, from the probe history of ``sidecar.history``.)

Pictures: each callable endpoint's latency over 24 h (sparkline) and when it
was down (incident strip); requests, errors and cache hits per hour over 7
days; each node's block-height lag over the last hour, one chart per network
in scope (so ``?network=finney`` is that network's page)."""

from __future__ import annotations

import html
import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jinja2
from aiohttp import web

from sidecar.dashboard.chart import hourly_chart
from sidecar.dashboard.pictures import incident_strip, lag_chart, sparkline
from sidecar.dashboard.view import (
    backoff_text,
    capacity_text,
    page_href,
    parse_network,
    scoped,
    updated_text,
)
from sidecar.history.series import lag_series, latency_series
from sidecar.probing.results import NODE_KINDS
from sidecar.registry import views
from sidecar.registry.api import upstream_live
from sidecar.registry.networks import runtime_lines
from sidecar.registry.networks_api import runtime_book
from sidecar.server.app_keys import HISTORY_KEY, REGISTRY_KEY, USAGE_KEY

log = logging.getLogger("chainproxy.sidecar.dashboard")

REFRESH_S = 30
_KIND_ORDER = ("node-rpc", "node-wss", "data-artifact", "sse")

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("sidecar.dashboard", "templates"),
    autoescape=jinja2.select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)


@dataclass(frozen=True, slots=True)
class _Usage:
    summary: dict[str, Any] | None  # None: unavailable (or the proxy does not serve the network)
    chart: Any
    updated: str | None  # "2027-01-15 08:15:00 UTC (3 min ago)"; None: never


async def _usage(request: web.Request, network: str | None) -> _Usage:
    svc = request.app.get(USAGE_KEY)
    if svc is None or (network is not None and network not in svc.config.proxy.networks):
        return _Usage(None, None, None)
    try:
        summary = await svc.summary(network)
        chart = hourly_chart(await svc.hourly_series(network), svc.clock())
    except Exception as e:  # the page shows "unavailable" rather than failing whole
        log.warning("usage statistics unavailable for the dashboard: %s", e)
        return _Usage(None, None, None)
    return _Usage(summary, chart, updated_text(svc.updated, svc.clock()))


def _error_page(e: views.PageError) -> web.Response:
    body = (
        f"<!doctype html><title>chainproxy</title><p>{html.escape(str(e))} — "
        '<a href="/">back to the dashboard</a></p>'
    )
    return web.Response(status=e.status, text=body, content_type="text/html")


async def dashboard(request: web.Request) -> web.Response:
    reg = request.app[REGISTRY_KEY]
    health, now = reg.health, reg.now()
    try:
        network = parse_network(reg.config, request.query.get("network"))
        config = scoped(reg.config, network)
        page = views.parse_page(request.query.get("page"))
        live = upstream_live(request.app)
        callable_ = views.callable_endpoints(config, health, page, live=live)
    except views.PageError as e:
        return _error_page(e)
    usage = await _usage(request, network)
    heat = views.heatmap(config, health)
    kinds_seen = {k for row in heat["rows"] for k in row["cells"]}
    incidents = reg.incidents.incidents()
    pictures = _pictures(request, config, [r["id"] for r in callable_["rows"]], incidents, now)
    html_text = _env.get_template("dashboard.html").render(
        refresh_s=REFRESH_S,
        generated=datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        networks=list(reg.config.networks),
        network=network,
        served=network is None or network in reg.config.proxy.networks,
        page_href=page_href,
        backoff_text=lambda until: backoff_text(until, now),
        capacity_text=capacity_text,
        usage=usage.summary,
        chart=usage.chart,
        updated=usage.updated,
        totals=views.registry_totals(config, health),
        rpc_pools=views.proxy_pools(config, health),
        endpoint_pools=views.endpoint_pools(config, health),
        root=views.root_endpoints(config, health, live),
        callable=callable_,
        heatmap=heat,
        heat_kinds=[k for k in _KIND_ORDER if k in kinds_seen],
        incidents=views.incident_list(config, incidents, now),
        timeline=_timeline_with_incidents(views.incident_timeline(config, incidents, now)),
        runtime_lines=runtime_lines(config, runtime_book(request.app)),
        **pictures,
    )
    return web.Response(
        text=html_text, content_type="text/html", headers={"Cache-Control": "no-store"}
    )


def _timeline_with_incidents(doc: dict[str, Any]) -> dict[str, Any]:
    """Only the rows that had incidents: the page says "none" rather than a
    wall of zeros (the JSON API keeps every row)."""
    return {
        "endpoints": [e for e in doc["endpoints"] if e["total"]],
        "hosts": [h for h in doc["hosts"] if h["total"]],
    }


def _pictures(
    request: web.Request, config: Any, row_ids: list[str], incidents: Any, now: float
) -> dict[str, Any]:
    """Sparklines and incident strips of the listed endpoints, lag charts per network."""
    history = request.app[HISTORY_KEY]
    nodes = [e for e in config.endpoints if e.kind in NODE_KINDS]
    minutes = history.minutes([*row_ids, *(e.id for e in nodes if e.id not in row_ids)], now)
    spans: dict[str, list[tuple[float, float | None]]] = {}
    for inc in incidents:
        spans.setdefault(inc.endpoint_id, []).append((inc.started, inc.ended))
    lag = {}
    for network in config.networks:
        mine = [e for e in nodes if e.network == network]
        labels = _node_labels(mine)
        lag[network] = lag_chart({labels[e.id]: lag_series(minutes[e.id], now) for e in mine})
    return {
        "sparks": {eid: sparkline(latency_series(minutes[eid], now)) for eid in row_ids},
        "strips": {eid: incident_strip(spans.get(eid, []), now) for eid in row_ids},
        "lag_charts": lag,
    }


def _node_labels(nodes: list[Any]) -> dict[str, str]:
    """``provider kind`` for each node, with the id's tail when two would read alike."""
    names = [f"{e.provider} {e.kind.removeprefix('node-')}" for e in nodes]
    return {
        e.id: name if names.count(name) == 1 else f"{name} …{e.id[-4:]}"
        for e, name in zip(nodes, names, strict=True)
    }
