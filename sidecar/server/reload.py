"""SIGHUP: the sidecar re-reads its config file and applies the registry in
place, without a restart: new endpoints are probed at once, removed ones are
no longer probed, shown or routed to (their open incidents close), and the
documents, the routing snapshots, /metrics and the usage statistics read the new
list. A file that does not load is refused with its one line and the running
config stays.

What the process was started with stays: where it listens (``sidecar.host``,
``sidecar.port``, or ``--host``/``--port``) and ``data_dir`` (its databases
are open); a change of those is logged as needing a restart. The launcher
refuses such a file before it signals anyone (``chainproxy/reload.py``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
import warnings
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable

from aiohttp import web

from common.config import Config, ConfigError, Endpoint, load_config
from common.config.restart import fixed_keys, lost_network
from sidecar.metrics.collector import collector_registry
from sidecar.probing.prober import Prober
from sidecar.probing.results import NODE_KINDS
from sidecar.server.app import _metrics
from sidecar.server.app_keys import CONFIG_KEY, METRICS_KEY, PROBER_KEY, REGISTRY_KEY

log = logging.getLogger("chainproxy.sidecar.reload")

RECENT = 20  # probes kept per endpoint for the API (the Prober's own bound)


def keep_process_settings(running: Config, new: Config) -> Config:
    """``new`` with the listening address and ``data_dir`` of ``running``."""
    sidecar = dataclasses.replace(new.sidecar, host=running.sidecar.host, port=running.sidecar.port)
    for key, was, now in (
        ("sidecar.host", running.sidecar.host, new.sidecar.host),
        ("sidecar.port", running.sidecar.port, new.sidecar.port),
        ("data_dir", running.data_dir, new.data_dir),
    ):
        if was != now:
            log.warning("reload: %s changed (%s -> %s): kept until a restart", key, was, now)
    return dataclasses.replace(new, sidecar=sidecar, data_dir=running.data_dir)


def apply(app: web.Application, new: Config) -> tuple[int, int]:
    """Put ``new`` in force in the running ``app``; (endpoints added, removed)."""
    config = keep_process_settings(app[CONFIG_KEY], new)
    # Every part the app keeps that holds the deployment's config (the registry,
    # the usage service, the probe history…) reads the new one from now on.
    for part in app.values():
        if isinstance(getattr(part, "config", None), Config):
            part.config = config
    with warnings.catch_warnings():
        # aiohttp deprecates changing a started app's state; these two keys are
        # read per request and must follow the file (a reload is rare and on the loop)
        warnings.simplefilter("ignore", DeprecationWarning)
        app[CONFIG_KEY] = config
        app[METRICS_KEY] = collector_registry(_metrics(app, config))  # reads config.endpoints
    prober = app.get(PROBER_KEY)
    if prober is None:
        return 0, 0
    if prober.chain_runtimes is not None:
        prober.chain_runtimes.config = config
    prober.config = config.probe  # intervals and thresholds: from each endpoint's next probe on
    added, removed = swap_endpoints(prober, config.endpoints)
    registry = app[REGISTRY_KEY]
    # incidents of endpoints no longer in the registry close now
    registry.incidents.reconcile(prober.health, (e.id for e in config.endpoints), registry.now())
    return added, removed


def swap_endpoints(prober: Prober, endpoints: Iterable[Endpoint]) -> tuple[int, int]:
    """The Prober's endpoints replaced: new ones probed at once, removed ones
    forgotten (a probe of one already scheduled finds no endpoint and stops).
    ``Prober`` has no method for this yet, hence its scheduler used from here."""
    new = {e.id: e for e in endpoints}
    added = [e for eid, e in new.items() if eid not in prober.endpoints]
    removed = prober.endpoints.keys() - new.keys()
    prober.endpoints = new  # same ids, changed fields: the next probe uses the new ones
    if removed:
        _forget(prober, removed)
        # a probe of one that was in flight lands after this: forget it again then
        later = prober.config.timeout_s + 2.0
        asyncio.get_running_loop().call_later(later, _forget, prober, removed)
    for e in added:
        prober.recent.setdefault(e.id, deque(maxlen=RECENT))
        prober._schedule(e.id, "full", 0.0)
        if e.kind in NODE_KINDS:
            prober._schedule(e.id, "head", prober.config.head_interval_s)
    prober.changed.set()
    return len(added), len(removed)


def _forget(prober: Prober, removed: set[str]) -> None:
    """No health, recent probes or probe counters of ``removed`` (the counters'
    series end in /metrics, as at a restart)."""
    for eid in removed:
        prober.health.pop(eid, None)
        prober.recent.pop(eid, None)
    prober.results = {k: n for k, n in prober.results.items() if k[0] not in removed}


def reload_from(app: web.Application, path: str, started: Config | None = None) -> bool:
    """SIGHUP's work: ``path`` read, validated, applied; whether it was. A file
    that moves the sidecar or ``data_dir`` from what it ``started`` with (the
    file as read at the start: ``--port``/``--data-dir`` may override it) is
    refused whole, as the launcher and the proxies refuse it."""
    try:
        new = load_config(path)
    except ConfigError as e:
        log.error("reload of %s refused, the running config stays: %s", path, e)
        return False
    except Exception:  # a reader's bug: the running config stays all the same
        log.exception("reload of %s refused, the running config stays", path)
        return False
    problem = fixed_keys(started, new) if started is not None else None
    if (problem := problem or lost_network(app[CONFIG_KEY], new)) is not None:
        log.error("reload of %s refused, the running config stays: config error: %s", path, problem)
        return False
    added, removed = apply(app, new)
    log.warning(
        "reloaded %s: %d endpoints (%d added, %d removed)",
        path,
        len(app[CONFIG_KEY].endpoints),
        added,
        removed,
    )
    return True


def on_sighup(path: str) -> Callable[[web.Application], AsyncIterator[None]]:
    """A ``cleanup_ctx`` lifecycle: SIGHUP reloads ``path`` while the app runs."""

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        loop = asyncio.get_running_loop()
        try:
            started: Config | None = load_config(path)
        except Exception:  # changed since the start: the keys are then checked no more
            started = None
        try:
            loop.add_signal_handler(signal.SIGHUP, reload_from, app, path, started)
        except (NotImplementedError, RuntimeError):  # not the main thread (tests)
            yield
            return
        try:
            yield
        finally:
            loop.remove_signal_handler(signal.SIGHUP)

    return lifecycle
