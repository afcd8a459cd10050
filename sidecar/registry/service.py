"""The registry as the handlers and the dashboard see it: the Prober's health,
the incidents and the clock, behind one object (no aiohttp).

The app's lifecycle builds the Prober with ``on_transition=registry.on_transition``,
then calls ``registry.attach(prober)`` (opens the incident store in
``data_dir/sidecar.sqlite3`` and reconciles it with the restored health) and
``registry.close()`` at shutdown. Before ``attach`` the health is empty and
incidents are kept in memory, so the documents answer from the first request on.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from common.config import Config, Endpoint
from sidecar.db import SIDECAR_DB
from sidecar.incidents.store import IncidentStore
from sidecar.incidents.tracker import IncidentTracker
from sidecar.probing.health import Health, Transition
from sidecar.probing.prober import Prober
from sidecar.probing.results import ProbeResult
from sidecar.registry.documents import endpoint_incidents

log = logging.getLogger("chainproxy.sidecar.registry")


class RegistryService:
    """Health (the Prober's, once attached), incidents and the clock for the documents."""

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
        path = path or self.config.data_dir / SIDECAR_DB
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

    def open_incidents(self) -> int:
        """Incidents ongoing now (the ``chainproxy_incidents_open`` gauge)."""
        return sum(1 for i in self.incidents.incidents() if i.ongoing)

    def endpoint_incidents(self, endpoint_id: str) -> list[dict[str, Any]]:
        """The ``incidents`` of ``GET /api/v1/endpoints/{id}``."""
        return endpoint_incidents(self.incidents.incidents(), endpoint_id, self.clock())
