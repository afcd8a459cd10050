"""The typed keys of the sidecar's state on the ``web.Application``.

In a module of their own so that handlers, the dashboard and the app's wiring
can all import them without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry

from common.config import Config
from sidecar.history.recorder import HistoryRecorder
from sidecar.probing.prober import Prober
from sidecar.probing.store import Store
from sidecar.registry.service import RegistryService
from sidecar.usage.service import UsageService

# Set by create_app:
CONFIG_KEY = web.AppKey("config", Config)
STARTED_KEY = web.AppKey("started", float)  # time.monotonic() at create_app, for uptime
CLOCK_KEY: web.AppKey[Callable[[], float]] = web.AppKey("clock")
REGISTRY_KEY = web.AppKey("registry", RegistryService)
HISTORY_KEY = web.AppKey("history", HistoryRecorder)  # probe minutes for the pictures
USAGE_KEY = web.AppKey("usage", UsageService)
METRICS_KEY = web.AppKey("metrics", CollectorRegistry)
# Set by the app's lifecycle once the app starts:
PROBER_KEY = web.AppKey("prober", Prober)
STORE_KEY = web.AppKey("store", Store)
