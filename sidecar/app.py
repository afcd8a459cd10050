"""The sidecar's aiohttp application: wiring only (routes, state, cleanup).

In this release it serves liveness and JSON errors; the registry, probes,
routing snapshot, statistics and dashboard are added behind the same factory.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from chainproxy.config import Config

CONFIG_KEY = web.AppKey("config", Config)
STARTED_KEY = web.AppKey("started", float)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def json_error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"code": status, "message": message}}, status=status)


@web.middleware
async def errors_as_json(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error is a JSON body, never aiohttp's HTML page or a bare 500."""
    try:
        return await handler(request)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return json_error(e.status, e.reason)


async def healthz(request: web.Request) -> web.Response:
    config = request.app[CONFIG_KEY]
    return web.json_response(
        {
            "status": "ok",
            "uptime_s": round(time.monotonic() - request.app[STARTED_KEY], 1),
            "networks": list(config.proxy.networks),
            "endpoints": len(config.endpoints),
        }
    )


def create_app(config: Config) -> web.Application:
    app = web.Application(middlewares=[errors_as_json])
    app[CONFIG_KEY] = config
    app[STARTED_KEY] = time.monotonic()
    app.router.add_get("/healthz", healthz)
    return app
