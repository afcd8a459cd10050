"""The handler of the dashboard at ``/`` (the page itself: ``sidecar.dashboard.page``)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from common.metrics_wire import FOLLOWS_METHOD
from sidecar.dashboard import page
from sidecar.registry.documents import PageError
from sidecar.server.app_keys import HISTORY_KEY, REGISTRY_KEY, USAGE_KEY
from sidecar.server.handlers.networks import chain_runtime_book
from sidecar.server.handlers.registry import upstream_live


def live_sockets(app: web.Application) -> dict[str, Any] | None:
    """The live proxies' WebSockets: connections, subscriptions by method, and
    chainHead follows beside them (None before any proxy reported)."""
    usage = app.get(USAGE_KEY)
    if usage is None:
        return None
    g = usage.proxy_metrics.gauges()
    if not g.proxies:
        return None
    subs = dict(g.client_subscriptions)
    follows = subs.pop(FOLLOWS_METHOD, 0)
    return {
        "connections": g.ws_connections,
        "subscriptions": sum(subs.values()),
        "by_method": sorted(subs.items()),
        "follows": follows,
        "upstream": sum(g.upstream_subscriptions.values()),
    }


async def dashboard(request: web.Request) -> web.Response:
    reg = request.app[REGISTRY_KEY]
    live = upstream_live(request.app)
    try:
        scope = page.scope_of(reg, request.query.get("network"), request.query.get("page"), live)
    except PageError as e:
        return web.Response(status=e.status, text=page.error_page(e), content_type="text/html")
    usage = await page.usage_of(request.app.get(USAGE_KEY), scope.network)
    text = page.render(
        reg,
        scope,
        usage,
        live,
        request.app[HISTORY_KEY],
        chain_runtime_book(request.app),
        sockets=live_sockets(request.app),
    )
    return web.Response(text=text, content_type="text/html", headers={"Cache-Control": "no-store"})
