"""The usage statistics as the rest of the sidecar sees them (no aiohttp).

``UsageService`` (``app[USAGE_KEY]``) owns the usage store: opened lazily,
reopened at most every 30 s after a failure, a corrupt file moved aside. The
handlers (``sidecar.server.handlers.usage``) hand it the batches' bodies; the
dashboard and ``/metrics`` read ``await summary(network)``, ``await
hourly(network)`` and its counters; the batches' live metrics go to
``proxy_metrics`` (``sidecar.metrics.proxy_counters``). Database work runs in a
thread so a large batch does not stall the loop; the store keeps the window's
totals in memory, so a summary costs ~1 ms.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.config import Config
from common.usage_wire import BatchError
from sidecar.metrics.proxy_counters import ProxyCounters
from sidecar.usage.stats.batch import parse_batch
from sidecar.usage.stats.summary import summarize
from sidecar.usage.stats.window import WindowTotals
from sidecar.usage.store import IngestResult, StoreUnavailable, UsageStore

log = logging.getLogger("chainproxy.sidecar.usage")

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
        self.calls_left_out = 0  # records of networks not served (a reload removed one)
        self.batches_failed = 0  # answered 503
        self.records = 0  # calls counted
        # Cumulative since start, per network: requests, errors, failovers, cache hits
        # (monotonic counters for /metrics; the API's numbers are the 7-day window).
        self.counted: dict[str, list[int]] = {}
        # The proxies' live metrics (the batches' optional ``metrics`` section).
        self.proxy_metrics = ProxyCounters(clock)
        self._open_failed_at: float | None = None
        self._open_lock = threading.Lock()

    @property
    def store_errors(self) -> int:
        return self.store.errors if self.store else 0

    @property
    def updated(self) -> float | None:
        """When the store last took a batch (None: never, or the store is not open)."""
        return self.store.updated if self.store else None

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
            if batch.metrics is not None:
                self.proxy_metrics.observe_gauges(batch.metrics, batch.sent_at)
            raise
        if result.duplicate:
            self.batches_duplicate += 1
        else:
            if batch.left_out:
                self.calls_left_out += batch.left_out_calls
                log.warning(
                    "usage batch %s: %d calls of networks not served (%s) left out",
                    batch.batch_id,
                    batch.left_out_calls,
                    ", ".join(batch.left_out),
                )
            self.batches_accepted += 1
            self.records += batch.records
            for r in batch.rollups:
                c = self.counted.setdefault(r.network, [0, 0, 0, 0])
                c[0] += r.requests
                c[1] += r.errors
                c[2] += r.failovers
                c[3] += r.cache_hits
            if batch.metrics is not None:  # after the store's batch-id check: counted once
                self.proxy_metrics.add(batch.metrics, batch.sent_at)
        return result

    async def summary(self, network: str | None = None) -> dict[str, Any]:
        """The ``GET /api/v1/usage`` document; ``network`` None = all networks, else
        one of ``proxy.networks`` (``ValueError`` otherwise)."""
        if network is not None and network not in self.config.proxy.networks:
            raise ValueError(f"unknown network {network!r}")
        store = self.open()
        now = self.clock()
        totals = await asyncio.to_thread(store.window_totals, now)
        try:
            methods, units = await asyncio.to_thread(store.top_methods, now, network)
        except StoreUnavailable:  # the in-memory totals still answer; the methods wait
            methods, units = [], 0
        return summarize(
            totals,
            networks=self.config.proxy.networks,
            endpoints=self.config.endpoints,
            network=network,
            updated=store.updated,
            now=now,
            window_s=store.window_s,
            methods=methods,
            units=units,
        )

    async def hourly(self, network: str | None = None) -> list[tuple[int, int]]:
        """Requests per hour over the window, for the dashboard's chart."""
        store = self.open()
        return await asyncio.to_thread(store.hourly_requests, self.clock(), network)

    async def hourly_series(self, network: str | None = None) -> list[tuple[Any, ...]]:
        """(hour, requests, errors, cache_hits, latency_ms_sum) per hour of the window."""
        store = self.open()
        return await asyncio.to_thread(store.hourly_series, self.clock(), network)

    async def window(self) -> tuple[WindowTotals, float | None]:
        """The window's totals (a copy) and when the store last took a batch."""
        store = self.open()
        totals = await asyncio.to_thread(store.window_totals, self.clock())
        return totals, store.updated

    async def maintain(self, every_s: float = 60.0) -> None:
        """Keep the store's in-memory window current, prune it when due."""
        while True:
            await asyncio.sleep(every_s)
            if self.store is not None:
                await asyncio.to_thread(self.store.tick, self.clock())


def _is_corrupt(e: BaseException | None) -> bool:
    """ "file is not a database" / "malformed": a DatabaseError that is not an
    operational one (locked, busy, disk I/O, read-only)."""
    return isinstance(e, sqlite3.DatabaseError) and not isinstance(e, sqlite3.OperationalError)
