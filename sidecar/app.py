"""The sidecar's aiohttp application: wiring only (routes, state, cleanup).

Domain code (health, routing, store, prober, probes) has no aiohttp imports
beyond the probe transport; handlers parse input, call it, return JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
from aiohttp import web

from common.config import Config, Endpoint
from sidecar.jsonfmt import iso
from sidecar.model import ProbeKind, ProbeResult
from sidecar.prober import ProbeFn, Prober
from sidecar.registry_api import REGISTRY_KEY, setup_registry
from sidecar.routing import chain_heads, route, snapshot
from sidecar.store import Store
from sidecar.usage_api import setup_usage

CONFIG_KEY = web.AppKey("config", Config)
STARTED_KEY = web.AppKey("started", float)
PROBER_KEY = web.AppKey("prober", Prober)
STORE_KEY = web.AppKey("store", Store)
CLOCK_KEY = web.AppKey("clock", Callable[[], float])

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ProbeFactory = Callable[[aiohttp.ClientSession, Config], ProbeFn]

INTERNAL = "/api/v1/internal/"


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
        resp = json_error(e.status, e.reason)
        if "Allow" in e.headers:
            resp.headers["Allow"] = e.headers["Allow"]
        return resp


@web.middleware
async def internal_token(request: web.Request, handler: Handler) -> web.StreamResponse:
    """``/api/v1/internal/`` needs ``Authorization: Bearer <token>`` when a token is set."""
    token = request.app[CONFIG_KEY].sidecar.token
    if token and request.path.startswith(INTERNAL):
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return json_error(401, "missing or wrong bearer token for the internal API")
    return await handler(request)


async def healthz(request: web.Request) -> web.Response:
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


async def internal_routes(request: web.Request) -> web.Response:
    config = request.app[CONFIG_KEY]
    network = request.match_info["network"]
    if network not in config.networks:
        return json_error(404, f"unknown network {network!r}")
    prober = request.app[PROBER_KEY]
    doc = snapshot(
        network,
        config.endpoints,
        prober.health,
        max_lag=config.networks[network].max_lag_blocks,
        now=request.app[CLOCK_KEY](),
    )
    return web.json_response(doc)


async def endpoint_detail(request: web.Request) -> web.Response:
    config = request.app[CONFIG_KEY]
    endpoint = config.endpoint_by_id(request.match_info["id"])
    if endpoint is None:
        return json_error(404, "unknown endpoint id")
    prober = request.app[PROBER_KEY]
    h = prober.health_of(endpoint.id)
    nodes = [e for e in config.endpoints if e.network == endpoint.network]
    tip, finalized = chain_heads(nodes, prober.health)
    r = route(endpoint, h, tip, config.networks[endpoint.network].max_lag_blocks)
    probes = list(reversed(prober.recent.get(endpoint.id, ())))  # newest first
    return web.json_response(
        {
            "id": endpoint.id,
            "url": endpoint.safe_url,
            "provider": endpoint.provider,
            "kind": endpoint.kind,
            "network": endpoint.network,
            "subnet": f"{endpoint.subnet:03d}",
            "archive": r.archive,
            "region": endpoint.region,
            "notes": endpoint.notes,
            "status": h.status,
            "classification": h.classification,
            "probed": h.probed,
            "latency_ms": r.latency_ms,
            "score": r.score,
            "heights": {
                "best": h.best,
                "finalized": h.finalized,
                "tip": tip,
                "network_finalized": finalized,
                "lag": r.lag,
                "synced": r.synced,
            },
            "last_probe_at": iso(h.last_probe_at),
            "last_ok_at": iso(h.last_ok_at),
            "probes": [
                {
                    "at": iso(p.at),
                    "kind": p.kind,
                    "classification": p.classification,
                    "latency_ms": p.latency_ms,
                    "best": p.best,
                    "finalized": p.finalized,
                    "archive": p.archive,
                    "detail": p.detail,
                }
                for p in probes
            ],
            "incidents": request.app[REGISTRY_KEY].endpoint_incidents(endpoint.id),
        }
    )


def _default_probe_factory(session: aiohttp.ClientSession, config: Config) -> ProbeFn:
    from sidecar.probes import probe

    async def run(endpoint: Endpoint, kind: ProbeKind) -> ProbeResult:
        return await probe(
            endpoint,
            session,
            kind=kind,
            timeout_s=config.probe.timeout_s,
            clock=time.time,
            genesis=config.networks[endpoint.network].genesis,
        )

    return run


def create_app(
    config: Config,
    *,
    probe_factory: ProbeFactory | None = None,
    clock: Callable[[], float] = time.time,
    probing: bool = True,
) -> web.Application:
    app = web.Application(middlewares=[errors_as_json, internal_token])
    app[CONFIG_KEY] = config
    app[STARTED_KEY] = time.monotonic()
    app[CLOCK_KEY] = clock

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        store = Store(config.data_dir / "sidecar.sqlite3")
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=64, limit_per_host=4),
            headers={"User-Agent": "chainproxy-sidecar/0.1"},
        )
        factory = probe_factory or _default_probe_factory
        registry = app[REGISTRY_KEY]
        prober = Prober(
            config.endpoints,
            factory(session, config),
            config.probe,
            store,
            clock=clock,
            on_transition=registry.on_transition,
        )
        registry.attach(prober)  # incidents: load, reconcile with the restored health
        app[STORE_KEY] = store
        app[PROBER_KEY] = prober
        task = asyncio.create_task(prober.run()) if probing else None
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            prober.flush()
            registry.close()
            await session.close()
            store.close()

    app.cleanup_ctx.append(lifecycle)
    from sidecar.metrics import setup_metrics  # imports this module: import late

    setup_metrics(app, config)
    from sidecar.dashboard import setup_dashboard

    setup_dashboard(app)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/api/v1/internal/routes/{network}", internal_routes)
    app.router.add_get("/api/v1/endpoints/{id}", endpoint_detail)
    setup_usage(app, config, clock)
    setup_registry(app, config, clock)
    return app
