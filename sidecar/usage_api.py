"""Usage statistics over HTTP: the addon's batches in, the 7-day summary out.

* ``POST /api/v1/internal/usage`` (bearer token, checked by the app's
  ``internal_token`` middleware): a batch of per-minute rollups (the wire form
  is in ``sidecar.stats.parse_batch``). 200 ``{"accepted": true, "duplicate":
  false, "rollups": n}``; the same ``batch_id`` again → 200 with
  ``"duplicate": true`` and nothing counted twice. A bad batch → 400 naming
  the problem, a body over 16 MiB → 413 (both: do not retry), the database
  unavailable → 503 with ``Retry-After`` (retry later); nothing is ever
  partially stored.
* ``GET /api/v1/usage[?network=finney]``: the summary of ``sidecar.stats``;
  an unknown network → 404.

``UsageService`` (``app[USAGE_KEY]``) is what other parts of the sidecar (the
dashboard, ``/metrics``) use: ``await summary(network)`` and its counters.
Database work runs in a thread so a large batch does not stall the loop; the
store keeps the window's totals in memory, so a summary costs ~1 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from common.config import Config
from sidecar.stats import BatchError, parse_batch, summarize
from sidecar.usage_store import IngestResult, StoreUnavailable, UsageStore

log = logging.getLogger("chainproxy.sidecar.usage")

MAX_BODY_BYTES = 16 * 1_048_576
RETRY_AFTER_S = 10
REOPEN_AFTER_S = 30.0


class UsageService:
    """The usage store (opened lazily, reopened after a failure) and counters."""

    def __init__(
        self,
        config: Config,
        clock: Callable[[], float] = time.time,
        *,
        path: Path | None = None,
        prune_interval_s: float = 600.0,
        busy_timeout_ms: int = 2000,
    ) -> None:
        self.config = config
        self.clock = clock
        self.path = path or config.data_dir / "usage.sqlite3"
        self.prune_interval_s = prune_interval_s
        self.busy_timeout_ms = busy_timeout_ms
        self.store: UsageStore | None = None
        self.batches_accepted = 0
        self.batches_duplicate = 0
        self.batches_rejected = 0
        self.batches_failed = 0  # answered 503
        self.records = 0  # calls counted
        # Cumulative since start, per network: requests, errors, failovers, cache hits
        # (monotonic counters for /metrics; the API's numbers are the 7-day window).
        self.counted: dict[str, list[int]] = {}
        self._open_failed_at: float | None = None
        self._open_lock = threading.Lock()

    @property
    def store_errors(self) -> int:
        return self.store.errors if self.store else 0

    def open(self) -> UsageStore:
        """The store, opened on first use; after a failure, retried at most every 30 s."""
        if self.store is not None:
            return self.store
        with self._open_lock:
            return self._open()

    def _open(self) -> UsageStore:
        if self.store is not None:
            return self.store
        if self._open_failed_at is not None and (
            time.monotonic() - self._open_failed_at < REOPEN_AFTER_S
        ):
            raise StoreUnavailable("usage store unavailable (opening failed recently)")
        try:
            try:
                store = self._new_store()
            except StoreUnavailable as e:
                if not _is_corrupt(e.__cause__):
                    raise
                self._set_aside()
                store = self._new_store()
        except StoreUnavailable:
            self._open_failed_at = time.monotonic()
            raise
        self.store, self._open_failed_at = store, None
        store.prune(self.clock())
        return store

    def _new_store(self) -> UsageStore:
        return UsageStore(
            self.path, prune_interval_s=self.prune_interval_s, busy_timeout_ms=self.busy_timeout_ms
        )

    def _set_aside(self) -> None:
        """Move a corrupt database (and its WAL) aside: statistics restart empty
        rather than being unavailable until someone deletes the file."""
        aside = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
        log.error("usage store %s is corrupt: moved aside to %s", self.path, aside.name)
        for suffix in ("", "-wal", "-shm"):
            src = Path(f"{self.path}{suffix}")
            try:
                src.rename(f"{aside}{suffix}")
            except FileNotFoundError:
                continue
            except OSError as e:
                log.error("cannot move %s aside: %s", src, e)
                raise StoreUnavailable(f"usage store is corrupt and cannot be moved: {e}") from e

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None

    async def ingest_body(self, body: bytes) -> IngestResult:
        """Decode, validate and store a batch (raises ``BatchError`` or
        ``StoreUnavailable``). Runs in a thread: a 10k-rollup batch takes a while."""
        return await asyncio.to_thread(self._ingest, body, self.clock())

    def _ingest(self, body: bytes, now: float) -> IngestResult:
        try:
            try:
                doc = json.loads(body)
            except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
                raise BatchError("the body is not JSON") from None
            batch = parse_batch(doc, self.config.proxy.networks, now)
        except BatchError:
            self.batches_rejected += 1
            raise
        try:
            result = self.open().ingest(batch, now)
        except StoreUnavailable:
            self.batches_failed += 1
            raise
        if result.duplicate:
            self.batches_duplicate += 1
        else:
            self.batches_accepted += 1
            self.records += batch.records
            for r in batch.rollups:
                c = self.counted.setdefault(r.network, [0, 0, 0, 0])
                c[0] += r.requests
                c[1] += r.errors
                c[2] += r.failovers
                c[3] += r.cache_hits
        return result

    async def summary(self, network: str | None = None) -> dict[str, Any]:
        """The ``GET /api/v1/usage`` document; ``network`` None = all networks, else
        one of ``proxy.networks`` (``ValueError`` otherwise)."""
        if network is not None and network not in self.config.proxy.networks:
            raise ValueError(f"unknown network {network!r}")
        store = self.open()
        now = self.clock()
        totals = await asyncio.to_thread(store.window_totals, now)
        return summarize(
            totals,
            networks=self.config.proxy.networks,
            endpoints=self.config.endpoints,
            network=network,
            updated=store.updated,
            now=now,
            window_s=store.window_s,
        )

    async def hourly(self, network: str | None = None) -> list[tuple[int, int]]:
        """Requests per hour over the window, for the dashboard's chart."""
        store = self.open()
        return await asyncio.to_thread(store.hourly_requests, self.clock(), network)

    async def maintain(self, every_s: float = 60.0) -> None:
        """Keep the store's in-memory window current, prune it when due."""
        while True:
            await asyncio.sleep(every_s)
            if self.store is not None:
                await asyncio.to_thread(self.store.tick, self.clock())


USAGE_KEY = web.AppKey("usage", UsageService)


def _is_corrupt(e: BaseException | None) -> bool:
    """ "file is not a database" / "malformed": a DatabaseError that is not an
    operational one (locked, busy, disk I/O, read-only)."""
    return isinstance(e, sqlite3.DatabaseError) and not isinstance(e, sqlite3.OperationalError)


def _error(status: int, message: str, **headers: str) -> web.Response:
    # The shape of sidecar.app.json_error (not imported: app.py imports this module).
    return web.json_response(
        {"error": {"code": status, "message": message}}, status=status, headers=headers
    )


class _TooLarge(Exception):
    pass


async def _read_body(request: web.Request, limit: int) -> bytes:
    """The body, up to ``limit`` bytes (the app-wide ``client_max_size`` of 1 MiB
    is too small for a full batch, so the stream is read here)."""
    if request.content_length is not None and request.content_length > limit:
        raise _TooLarge
    buf = bytearray()
    async for chunk in request.content.iter_chunked(1 << 16):
        buf += chunk
        if len(buf) > limit:
            raise _TooLarge
    return bytes(buf)


async def post_usage(request: web.Request) -> web.Response:
    svc = request.app[USAGE_KEY]
    try:
        body = await _read_body(request, MAX_BODY_BYTES)
    except _TooLarge:
        svc.batches_rejected += 1
        return _error(413, f"usage batch body larger than {MAX_BODY_BYTES} bytes")
    try:
        result = await svc.ingest_body(body)
    except BatchError as e:
        return _error(400, f"bad usage batch: {e}")
    except StoreUnavailable as e:
        return _error(503, f"{e}; retry later", **{"Retry-After": str(RETRY_AFTER_S)})
    return web.json_response(
        {"accepted": True, "duplicate": result.duplicate, "rollups": result.rollups}
    )


async def get_usage(request: web.Request) -> web.Response:
    svc = request.app[USAGE_KEY]
    network = request.query.get("network") or None
    if network is not None and network not in svc.config.proxy.networks:
        known = ", ".join(svc.config.proxy.networks)
        return _error(404, f"unknown network {network[:40]!r} (known: {known})")
    try:
        doc = await svc.summary(network)
    except StoreUnavailable as e:
        return _error(503, str(e), **{"Retry-After": str(RETRY_AFTER_S)})
    return web.json_response(doc)


def setup_usage(
    app: web.Application, config: Config, clock: Callable[[], float] = time.time
) -> UsageService:
    """Register the usage routes, ``app[USAGE_KEY]`` and the store's lifecycle."""
    svc = UsageService(config, clock)
    app[USAGE_KEY] = svc

    async def usage_lifecycle(_app: web.Application) -> AsyncIterator[None]:
        try:
            await asyncio.to_thread(svc.open)
        except StoreUnavailable:
            pass  # logged; each request retries (503 meanwhile), the rest of the app runs
        task = asyncio.create_task(svc.maintain())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            svc.close()

    app.cleanup_ctx.append(usage_lifecycle)
    app.router.add_post("/api/v1/internal/usage", post_usage)
    app.router.add_get("/api/v1/usage", get_usage)
    return svc
