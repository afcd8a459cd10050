"""Usage records: aggregated in memory per minute, shipped to the sidecar in
the background, spooled on disk so that nothing is lost.

* ``UsageAggregator`` (pure, clock injected): ``record()`` is a dict update on
  the request path; ``drain()`` hands over per-minute rollups keyed by
  (minute, network, endpoint, method) with counts and a latency histogram.
* ``UsageShipper``: every ``flush_s`` it drains the aggregator into a batch
  with a unique id, appends it to the on-disk spool (``data_dir/spool``,
  a diskcache Index shared by the proxy processes of the machine), then
  delivers spooled batches oldest first. A batch leaves the spool only when
  the sidecar accepted it; batch ids make a repeated delivery harmless. Past
  ``spool_max_batches`` the oldest batch is dropped, counted and logged.
  On a graceful stop or reload the last records are drained into the spool
  synchronously, and delivered after the restart.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import diskcache

from addon.live_metrics import LiveMetrics
from common import latency_hist
from common.metrics_wire import HEARTBEAT_S

log = logging.getLogger("chainproxy.usage")

Key = tuple[int, str, str | None, str]  # minute, network, endpoint id, method


@dataclass(slots=True)
class _Rollup:
    requests: int = 0
    errors: int = 0
    failovers: int = 0
    cache_hits: int = 0
    latency_ms_sum: float = 0.0
    hist: dict[int, int] = field(default_factory=dict)


class UsageAggregator:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._rollups: dict[Key, _Rollup] = {}
        self.recorded = 0

    def __len__(self) -> int:
        return len(self._rollups)

    def record(
        self,
        *,
        network: str,
        method: str,
        endpoint: str | None,
        latency_ms: float,
        error: bool,
        failover: bool,
        cache_hit: bool,
        at: float | None = None,
    ) -> None:
        minute = int((self._clock() if at is None else at) // 60)
        key = (minute, network, endpoint, method)
        r = self._rollups.get(key)
        if r is None:
            r = self._rollups[key] = _Rollup()
        r.requests += 1
        r.errors += error
        r.failovers += failover
        r.cache_hits += cache_hit
        r.latency_ms_sum += latency_ms
        latency_hist.add(r.hist, latency_ms)
        self.recorded += 1

    def drain(self) -> list[dict[str, Any]]:
        rollups, self._rollups = self._rollups, {}
        return [
            {
                "minute": minute,
                "network": network,
                "endpoint": endpoint,
                "method": method,
                "requests": r.requests,
                "errors": r.errors,
                "failovers": r.failovers,
                "cache_hits": r.cache_hits,
                "latency_ms_sum": round(r.latency_ms_sum, 3),
                "latency_hist": latency_hist.to_wire(r.hist),
            }
            for (minute, network, endpoint, method), r in rollups.items()
        ]


def new_batch(
    rollups: list[dict[str, Any]], now: float, metrics: dict[str, Any] | None = None
) -> dict[str, Any]:
    batch: dict[str, Any] = {"batch_id": uuid.uuid4().hex, "sent_at": now, "rollups": rollups}
    if metrics is not None:
        batch["metrics"] = metrics  # live counters and gauges (common/metrics_wire.py)
    return batch


class Spool:
    """Bounded, ordered, on-disk, process-safe: diskcache Index keyed by batch id."""

    def __init__(self, directory: Path, *, max_batches: int) -> None:
        self._index = diskcache.Index(str(directory))
        self.max_batches = max_batches
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._index)

    def append(self, batch: dict[str, Any]) -> None:
        self._index[batch["batch_id"]] = batch
        while len(self._index) > self.max_batches:
            try:
                oldest, dropped = self._index.popitem(last=False)
            except KeyError:
                break
            self.dropped += 1
            n = sum(r["requests"] for r in dropped.get("rollups", ()))
            log.error(
                "usage spool full (%d batches): dropped the oldest batch %s (%d calls)",
                self.max_batches,
                oldest,
                n,
            )

    def oldest(self, n: int) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for key in self._index.keys():  # insertion order: oldest first
            try:
                out.append((key, self._index[key]))
            except KeyError:  # another process delivered it meanwhile
                continue
            if len(out) >= n:
                break
        return out

    def remove(self, batch_id: str) -> None:
        self._index.pop(batch_id, None)


Deliver = Callable[[dict[str, Any]], Any]  # async: True when accepted


class UsageShipper:
    def __init__(
        self,
        aggregator: UsageAggregator,
        spool: Spool,
        deliver: Callable[[dict[str, Any]], Any],
        *,
        flush_s: float,
        clock: Callable[[], float] = time.time,
        max_retry_s: float = 10.0,
        metrics: LiveMetrics | None = None,
        gauges: Callable[[], dict[str, Any]] = dict,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        self.aggregator = aggregator
        self.metrics = metrics
        self._gauges = gauges
        self.heartbeat_s = heartbeat_s
        self._last_batch = float("-inf")
        self.spool = spool
        self._deliver = deliver
        self.flush_s = flush_s
        self.max_retry_s = max_retry_s
        self._clock = clock
        self.delivered = 0
        self.failures = 0

    def spool_pending(self) -> int:
        """Drain the aggregator (and the live counters) into the spool; also used
        synchronously at stop. An idle proxy still spools a batch every
        ``heartbeat_s``: the sidecar's ``updated`` then means "a proxy is alive"."""
        rollups = self.aggregator.drain()
        now = self._clock()
        live = self.metrics is not None and self.metrics.pending
        if (
            rollups
            or live
            or (self.metrics is not None and now - self._last_batch >= self.heartbeat_s)
        ):
            metrics = self.metrics.drain(self._gauges()) if self.metrics is not None else None
            self.spool.append(new_batch(rollups, now, metrics))
            self._last_batch = now
        return len(rollups)

    async def deliver_spooled(self, max_batches: int = 50) -> bool:
        """Send spooled batches, oldest first; stop at the first failure."""
        for batch_id, batch in self.spool.oldest(max_batches):
            if not await self._deliver(batch):
                return False
            self.spool.remove(batch_id)
            self.delivered += 1
        return True

    async def run(self) -> None:
        delay = self.flush_s
        while True:
            await asyncio.sleep(delay)
            try:
                self.spool_pending()
                ok = await self.deliver_spooled()
            except asyncio.CancelledError:
                raise
            except Exception:  # the shipper must outlive any one bad moment
                log.exception("usage delivery failed unexpectedly")
                ok = False
            if ok:
                if self.failures:
                    log.info("usage delivery to the sidecar resumed (%d spooled)", len(self.spool))
                self.failures = 0
                delay = self.flush_s
            else:
                self.failures += 1
                if self.failures == 1 or self.failures % 10 == 0:
                    log.warning(
                        "sidecar not accepting usage; %d batch(es) spooled on disk",
                        len(self.spool),
                    )
                delay = min(self.max_retry_s, max(self.flush_s, delay * 2))
