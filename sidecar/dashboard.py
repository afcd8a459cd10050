"""The dashboard at ``/``: one server-rendered HTML page (Jinja2), readable
without JavaScript, refreshed by a meta tag. It calls the same view functions
as the JSON API, so the page and ``/api/v1/…`` never disagree. (URL in
``sidecar.routes``.)"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import jinja2
from aiohttp import web

from sidecar import views
from sidecar.chart import hourly_chart
from sidecar.keys import REGISTRY_KEY, USAGE_KEY

log = logging.getLogger("chainproxy.sidecar.dashboard")

REFRESH_S = 30
_KIND_ORDER = ("node-rpc", "node-wss", "data-artifact", "sse")

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("sidecar", "templates"),
    autoescape=jinja2.select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)


async def _usage(request: web.Request) -> tuple[dict[str, Any] | None, Any]:
    svc = request.app.get(USAGE_KEY)
    if svc is None:
        return None, None
    try:
        summary = await svc.summary(None)
        chart = hourly_chart(await svc.hourly(None), svc.clock())
    except Exception as e:  # the page shows "unavailable" rather than failing whole
        log.warning("usage statistics unavailable for the dashboard: %s", e)
        return None, None
    return summary, chart


async def dashboard(request: web.Request) -> web.Response:
    reg = request.app[REGISTRY_KEY]
    config, health, now = reg.config, reg.health, reg.now()
    try:
        page = views.parse_page(request.query.get("page"))
        callable_ = views.callable_endpoints(config, health, page)
    except views.PageError as e:
        body = (
            f"<!doctype html><title>chainproxy</title><p>{e} — "
            '<a href="/">back to the dashboard</a></p>'
        )
        return web.Response(status=e.status, text=body, content_type="text/html")
    usage, chart = await _usage(request)
    heat = views.heatmap(config, health)
    kinds_seen = {k for row in heat["rows"] for k in row["cells"]}
    incidents = reg.incidents.incidents()
    html = _env.get_template("dashboard.html").render(
        refresh_s=REFRESH_S,
        generated=datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        networks=list(config.proxy.networks),
        usage=usage,
        chart=chart,
        totals=views.registry_totals(config, health),
        rpc_pools=views.proxy_pools(config, health),
        endpoint_pools=views.endpoint_pools(config, health),
        root=views.root_endpoints(config, health),
        callable=callable_,
        heatmap=heat,
        heat_kinds=[k for k in _KIND_ORDER if k in kinds_seen],
        incidents=views.incident_list(config, incidents, now),
        timeline=_timeline_with_incidents(views.incident_timeline(config, incidents, now)),
    )
    return web.Response(text=html, content_type="text/html", headers={"Cache-Control": "no-store"})


def _timeline_with_incidents(doc: dict[str, Any]) -> dict[str, Any]:
    """Only the rows that had incidents: the page says "none" rather than a
    wall of zeros (the JSON API keeps every row)."""
    return {
        "endpoints": [e for e in doc["endpoints"] if e["total"]],
        "hosts": [h for h in doc["hosts"] if h["total"]],
    }
