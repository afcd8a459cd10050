"""The registry's public JSON API: pools, totals, endpoint lists, heatmap,
incidents and the OpenAPI document (all ``GET``; other methods → 405 JSON).

| path | document (``sidecar.views``) |
|---|---|
| ``/api/v1/registry/totals`` | ``registry_totals`` |
| ``/api/v1/pools/rpc`` | ``proxy_pools`` |
| ``/api/v1/pools/endpoints`` | ``endpoint_pools`` |
| ``/api/v1/endpoints/root`` | ``root_endpoints`` |
| ``/api/v1/endpoints/callable?page=N`` | ``callable_endpoints`` (bad page 400, past end 404) |
| ``/api/v1/heatmap`` | ``heatmap`` |
| ``/api/v1/incidents`` | ``incident_list`` |
| ``/api/v1/incidents/timeline`` | ``incident_timeline`` |
| ``/api/v1/openapi.json`` | ``sidecar.openapi.openapi_document`` |

``RegistryService`` (``app[REGISTRY_KEY]``) owns the incidents: the app's
lifecycle builds the Prober with ``on_transition=registry.on_transition``,
then calls ``registry.attach(prober)`` (opens the incident store in
``data_dir/sidecar.sqlite3`` and reconciles it with the restored health) and
``registry.close()`` at shutdown. The dashboard uses the same service:
``registry.health``, ``registry.incidents.incidents()``, ``registry.now()``
and the view functions of ``sidecar.views``.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from aiohttp import web

from common.config import Config, Endpoint
from sidecar.health import Health, Transition
from sidecar.incident_store import IncidentStore
from sidecar.incidents import IncidentTracker
from sidecar.model import ProbeResult
from sidecar.openapi import openapi_document
from sidecar.prober import Prober
from sidecar.views import (
    PageError,
    callable_endpoints,
    endpoint_incidents,
    endpoint_pools,
    heatmap,
    incident_list,
    incident_timeline,
    parse_page,
    proxy_pools,
    registry_totals,
    root_endpoints,
)

log = logging.getLogger("chainproxy.sidecar.registry")


class RegistryService:
    """Health (the Prober's, once attached), incidents and the clock for the views."""

    def __init__(self, config: Config, clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        self.prober: Prober | None = None
        self.incidents = IncidentTracker(None, clock=clock)  # in memory until attach()
        self._store: IncidentStore | None = None

    @property
    def health(self) -> Mapping[str, Health]:
        return self.prober.health if self.prober is not None else {}

    def now(self) -> float:
        return self.clock()

    def on_transition(
        self, endpoint: Endpoint, health: Health, transition: Transition, result: ProbeResult
    ) -> None:
        """Pass to ``Prober(on_transition=…)``."""
        self.incidents.on_transition(endpoint, health, transition, result)

    def attach(self, prober: Prober, path: Path | None = None) -> None:
        """Load the persisted incidents (``data_dir/sidecar.sqlite3`` unless
        ``path``) and reconcile them with the Prober's restored health. A store
        that cannot be opened leaves incidents in memory only (logged)."""
        self.prober = prober
        path = path or self.config.data_dir / "sidecar.sqlite3"
        try:
            self._store = IncidentStore(path)
            self.incidents = IncidentTracker(self._store, clock=self.clock)
        except (sqlite3.Error, OSError) as e:
            log.error("incident store %s unavailable, keeping incidents in memory: %s", path, e)
            if self._store is not None:
                self._store.close()
            self._store = None
            self.incidents = IncidentTracker(None, clock=self.clock)
        self.incidents.reconcile(prober.health, (e.id for e in self.config.endpoints), self.clock())

    def close(self) -> None:
        self.incidents.flush()
        if self._store is not None:
            self._store.close()
            self._store = None

    def endpoint_incidents(self, endpoint_id: str) -> list[dict[str, Any]]:
        """The ``incidents`` of ``GET /api/v1/endpoints/{id}``."""
        return endpoint_incidents(self.incidents.incidents(), endpoint_id, self.clock())


REGISTRY_KEY = web.AppKey("registry", RegistryService)


def _error(status: int, message: str) -> web.Response:
    # The shape of sidecar.app.json_error (not imported: app.py imports this module).
    return web.json_response({"error": {"code": status, "message": message}}, status=status)


def _svc(request: web.Request) -> RegistryService:
    return request.app[REGISTRY_KEY]


async def get_totals(request: web.Request) -> web.Response:
    svc = _svc(request)
    return web.json_response(registry_totals(svc.config, svc.health))


async def get_pools_rpc(request: web.Request) -> web.Response:
    svc = _svc(request)
    return web.json_response(proxy_pools(svc.config, svc.health))


async def get_pools_endpoints(request: web.Request) -> web.Response:
    svc = _svc(request)
    return web.json_response(endpoint_pools(svc.config, svc.health))


async def get_root(request: web.Request) -> web.Response:
    svc = _svc(request)
    return web.json_response(root_endpoints(svc.config, svc.health))


async def get_callable(request: web.Request) -> web.Response:
    svc = _svc(request)
    values = request.query.getall("page", [])
    if len(values) > 1:
        return _error(400, "give page once")
    try:
        page = parse_page(values[0] if values else None)
        doc = callable_endpoints(svc.config, svc.health, page)
    except PageError as e:
        return _error(e.status, str(e))
    return web.json_response(doc)


async def get_heatmap(request: web.Request) -> web.Response:
    svc = _svc(request)
    return web.json_response(heatmap(svc.config, svc.health))


async def get_incidents(request: web.Request) -> web.Response:
    svc = _svc(request)
    return web.json_response(incident_list(svc.config, svc.incidents.incidents(), svc.now()))


async def get_timeline(request: web.Request) -> web.Response:
    svc = _svc(request)
    return web.json_response(incident_timeline(svc.config, svc.incidents.incidents(), svc.now()))


async def get_openapi(_request: web.Request) -> web.Response:
    return web.json_response(openapi_document())


def setup_registry(
    app: web.Application, config: Config, clock: Callable[[], float] = time.time
) -> RegistryService:
    """Register the registry routes and ``app[REGISTRY_KEY]``. The app's own
    lifecycle attaches the Prober (see the module docstring)."""
    svc = RegistryService(config, clock)
    app[REGISTRY_KEY] = svc
    # Plain paths are matched before the app's ``/api/v1/endpoints/{id}`` whatever
    # the order of registration (aiohttp looks the full path up first).
    app.router.add_get("/api/v1/registry/totals", get_totals)
    app.router.add_get("/api/v1/pools/rpc", get_pools_rpc)
    app.router.add_get("/api/v1/pools/endpoints", get_pools_endpoints)
    app.router.add_get("/api/v1/endpoints/root", get_root)
    app.router.add_get("/api/v1/endpoints/callable", get_callable)
    app.router.add_get("/api/v1/heatmap", get_heatmap)
    app.router.add_get("/api/v1/incidents", get_incidents)
    app.router.add_get("/api/v1/incidents/timeline", get_timeline)
    app.router.add_get("/api/v1/openapi.json", get_openapi)
    return svc
