"""The sidecar's aiohttp application: middlewares, state, lifecycles and wiring.

``create_app`` builds the state (``sidecar.server.app_keys``), adds the URL table
(``sidecar.server.routes``) and three ``cleanup_ctx`` lifecycles: the probing one
(probe store, HTTP session, Prober, incidents), the usage store's and the
quarantine watch's (``sidecar.incidents.quarantine``). Each sets up before its
``yield`` and tears down after, so a failed start still cleans up. Handlers
(``sidecar.server.handlers``) and domain code live elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import time
from collections.abc import AsyncIterator, Callable

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler

from common.config import Config, Endpoint
from sidecar.db import SIDECAR_DB
from sidecar.history.recorder import HistoryRecorder
from sidecar.history.store import HISTORY_DB, HistoryStore
from sidecar.incidents.quarantine import SILENT, QuarantineWatch
from sidecar.metrics.collector import SidecarCollector, collector_registry
from sidecar.probing.chain_runtime import ChainRuntimeBook
from sidecar.probing.prober import ProbeFn, Prober, StateProbeFn
from sidecar.probing.probes import ProbeCall, probe
from sidecar.probing.probes.state import check_state
from sidecar.probing.results import ProbeKind, ProbeResult
from sidecar.probing.store import Store
from sidecar.registry.service import RegistryService
from sidecar.server.app_keys import (
    CLOCK_KEY,
    CONFIG_KEY,
    HISTORY_KEY,
    METRICS_KEY,
    PROBER_KEY,
    REGISTRY_KEY,
    STARTED_KEY,
    STORE_KEY,
    USAGE_KEY,
)
from sidecar.server.handlers.metagraphed import metagraphed_errors
from sidecar.server.json_errors import json_error
from sidecar.server.routes import ROUTES
from sidecar.usage.service import UsageService
from sidecar.usage.store import StoreUnavailable

ProbeFactory = Callable[[aiohttp.ClientSession, Config], ProbeFn]
StateProbeFactory = Callable[[aiohttp.ClientSession, Config], StateProbeFn]

INTERNAL = "/api/v1/internal/"


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


def _default_probe_factory(session: aiohttp.ClientSession, config: Config) -> ProbeFn:
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


def _default_state_probe_factory(session: aiohttp.ClientSession, config: Config) -> StateProbeFn:
    async def run(endpoint: Endpoint, blocks: tuple[int, ...]) -> tuple[tuple[int, bool], ...]:
        call = ProbeCall(endpoint, session, timeout_s=config.probe.timeout_s)
        return await check_state(call, blocks)

    return run


async def _stop(task: asyncio.Task[None] | None) -> None:
    """Cancel a background loop and wait until it has stopped."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _probing(
    config: Config,
    probe_factory: ProbeFactory,
    state_factory: StateProbeFactory | None,
    clock: Callable[[], float],
    probing: bool,
) -> Callable[[web.Application], AsyncIterator[None]]:
    """The probing lifecycle: probe store, session, Prober (its loop only when
    ``probing``; its chain runtime book kept in the probe store; the state
    checks of its nodes' horizons, when a ``state_factory``) and the registry's
    incidents attached to it."""

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        store = Store(config.data_dir / SIDECAR_DB)
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=64, limit_per_host=4),
            headers={"User-Agent": "chainproxy-sidecar/0.1"},
        )
        registry = app[REGISTRY_KEY]
        history = app[HISTORY_KEY]  # every probe result also goes to the pictures' history
        history.store = HistoryStore(config.data_dir / HISTORY_DB)
        prober = Prober(
            config.endpoints,
            history.recording(probe_factory(session, config), lambda: prober.health),
            config.probe,
            store,
            clock=clock,
            on_transition=registry.on_transition,
            chain_runtimes=ChainRuntimeBook(config, store, clock),
            state_probe=None if state_factory is None else state_factory(session, config),
            # blocks the proxies saw a node answer "state discarded" for
            reported=lambda eid: app[USAGE_KEY].proxy_metrics.gauges().upstream_state_lost.get(eid),
        )
        registry.attach(prober)  # incidents: load, reconcile with the restored health
        app[STORE_KEY] = store
        app[PROBER_KEY] = prober
        task = asyncio.create_task(prober.run()) if probing else None
        try:
            yield
        finally:
            await _stop(task)
            prober.flush()
            registry.close()
            await session.close()
            store.close()
            history.flush(clock())
            history.store.close()

    return lifecycle


async def _usage_lifecycle(app: web.Application) -> AsyncIterator[None]:
    """The usage store: opened at start if it can be, kept current, closed."""
    svc = app[USAGE_KEY]
    try:
        await asyncio.to_thread(svc.open)
    except StoreUnavailable:
        pass  # logged; each request retries (503 meanwhile), the rest of the app runs
    task = asyncio.create_task(svc.maintain())
    try:
        yield
    finally:
        await _stop(task)
        svc.close()


async def _quarantine_lifecycle(app: web.Application) -> AsyncIterator[None]:
    """Nodes the proxies' cross-checks quarantined become ``answer-mismatch``
    incidents, nodes whose subscription socket went silent ``silent`` ones,
    closed when no live proxy reports them (``incidents/quarantine.py``); the
    registry's endpoints are read at each round, so a reload counts."""
    watch = QuarantineWatch(
        tracker=lambda: app[REGISTRY_KEY].incidents,
        quarantined=lambda: app[USAGE_KEY].proxy_metrics.gauges().upstream_quarantined,
        known=lambda: {e.id for e in app[CONFIG_KEY].endpoints},
        clock=app[CLOCK_KEY],
    )
    # nodes whose subscription socket went silent: ``silent`` incidents, the same rule
    silent = QuarantineWatch(
        tracker=lambda: app[REGISTRY_KEY].incidents,
        quarantined=lambda: app[USAGE_KEY].proxy_metrics.gauges().upstream_silent,
        known=lambda: {e.id for e in app[CONFIG_KEY].endpoints},
        clock=app[CLOCK_KEY],
        message=SILENT,
    )
    watch.start()
    silent.start()
    try:
        yield
    finally:
        await watch.stop()
        await silent.stop()


def _metrics(app: web.Application, config: Config) -> SidecarCollector:
    """The collector reads the prober and the services at scrape time: the
    prober only exists once the app has started."""

    def open_incidents() -> int | None:
        reg = app.get(REGISTRY_KEY)
        return None if reg is None else reg.open_incidents()

    return SidecarCollector(
        config,
        prober=lambda: app.get(PROBER_KEY),
        usage=lambda: app.get(USAGE_KEY),
        open_incidents=open_incidents,
    )


def create_app(
    config: Config,
    *,
    probe_factory: ProbeFactory | None = None,
    clock: Callable[[], float] = time.time,
    probing: bool = True,
    state_probe_factory: StateProbeFactory | None = None,
) -> web.Application:
    """``probe_factory``, ``state_probe_factory``: the probes (tests pass
    fakes); the state checks are the real ones only with the real probes."""
    # metagraphed_errors inside errors_as_json: Metagraphed's paths get its envelope.
    app = web.Application(middlewares=[errors_as_json, metagraphed_errors, internal_token])
    app[CONFIG_KEY] = config
    app[STARTED_KEY] = time.monotonic()
    app[CLOCK_KEY] = clock
    app[REGISTRY_KEY] = RegistryService(config, clock)
    app[HISTORY_KEY] = HistoryRecorder(config, None)  # its store opens with the probing
    app[USAGE_KEY] = UsageService(config, clock)
    app[METRICS_KEY] = collector_registry(_metrics(app, config))
    # Started in this order, stopped in the reverse one.
    app.cleanup_ctx.append(
        _probing(
            config,
            probe_factory or _default_probe_factory,
            state_probe_factory or (None if probe_factory else _default_state_probe_factory),
            clock,
            probing,
        )
    )
    app.cleanup_ctx.append(_usage_lifecycle)
    app.cleanup_ctx.append(_quarantine_lifecycle)
    app.add_routes(ROUTES)
    return app
