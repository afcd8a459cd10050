"""Handlers of the operational paths: liveness, Prometheus metrics and the
OpenAPI document (URLs in ``sidecar.server.routes``)."""

from __future__ import annotations

import time

from aiohttp import web

from sidecar.metrics.collector import CONTENT_TYPE, exposition
from sidecar.server.app_keys import CONFIG_KEY, METRICS_KEY, PROBER_KEY, STARTED_KEY
from sidecar.server.openapi.document import openapi_document


async def healthz(request: web.Request) -> web.Response:
    """Liveness: answers as soon as the app runs, probes or not."""
    config = request.app[CONFIG_KEY]
    prober = request.app.get(PROBER_KEY)
    return web.json_response(
        {
            "status": "ok",
            "uptime_s": round(time.monotonic() - request.app[STARTED_KEY], 1),
            "networks": list(config.proxy.networks),
            "endpoints": len(config.endpoints),
            "probes_run": prober.probes_run if prober else 0,
        }
    )


async def get_metrics(request: web.Request) -> web.Response:
    body = exposition(request.app[METRICS_KEY])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


async def get_openapi(_request: web.Request) -> web.Response:
    return web.json_response(openapi_document())
