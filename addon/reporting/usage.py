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
  When the spool cannot be written (a full disk), batches wait in a bounded
  memory backlog (``memory_max_batches``; past it the oldest is dropped,
  counted and logged) and are delivered from there, or moved to the spool
  once it works again; the outage is logged once, and its end once.
  On a graceful stop or reload the last records are drained into the spool
  synchronously, and delivered after the restart.

The spool and the backlog themselves are in ``addon.reporting.spool``; the
batch on the wire is ``common.usage_wire``'s.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from addon.reporting.live_metrics import USAGE_DROPPED, LiveMetrics
from addon.reporting.spool import Backlog, Spool, SpoolError
from common import latency_hist
from common.metrics_wire import HEARTBEAT_S
from common.outage import Outage
from common.usage_wire import Counts, calls_in, new_batch, rollup_doc

log = logging.getLogger("chainproxy.usage")

__all__ = ["Spool", "SpoolError", "UsageAggregator", "UsageShipper", "new_batch"]

Key = tuple[int, str, str | None, str]  # minute, network, endpoint id, method


@dataclass(slots=True)
class _Rollup(Counts):  # the wire's counts (common/usage_wire.py), latencies and units
    hist: dict[int, int] = field(default_factory=dict)
    units: int = 0


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
        units: int = 0,
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
        r.units += units
        latency_hist.add(r.hist, latency_ms)
        self.recorded += 1

    def add_units(self, *, network: str, method: str, units: int, at: float | None = None) -> None:
        """Units charged after a call's record (a long operation's later
        pages): its method's units of this minute, in no call's count and on no
        endpoint (the pages went through chainproxy's own legacy calls)."""
        minute = int((self._clock() if at is None else at) // 60)
        key = (minute, network, None, method)
        r = self._rollups.get(key)
        if r is None:
            r = self._rollups[key] = _Rollup()
        r.units += units

    def drain(self) -> list[dict[str, Any]]:
        rollups, self._rollups = self._rollups, {}
        return [rollup_doc(*key, r, r.hist, r.units) for key, r in rollups.items()]


Deliver = Callable[[dict[str, Any]], Any]  # async: True when accepted


class UsageShipper:
    def __init__(
        self,
        aggregator: UsageAggregator,
        spool: Spool,
        deliver: Deliver,
        *,
        flush_s: float,
        clock: Callable[[], float] = time.time,
        max_retry_s: float = 10.0,
        metrics: LiveMetrics | None = None,
        gauges: Callable[[], dict[str, Any]] = dict,
        heartbeat_s: float = HEARTBEAT_S,
        memory_max_batches: int = 1000,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    ) -> None:
        self._sleep = sleep
        self.aggregator = aggregator
        self.metrics = metrics
        self._gauges = gauges
        self.heartbeat_s = heartbeat_s
        self._last_batch = float("-inf")
        self.spool = spool
        # Batches the spool could not take (a full disk): kept here, bounded,
        # moved to the spool once it works again or delivered from here.
        self.backlog = Backlog(memory_max_batches)
        self.spool_outage = Outage()
        # Delivered, but the spool could not forget them (a deletion needs disk
        # space too): not sent again, removed again at every flush.
        self._unremoved: set[str] = set()
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
            dropped = self.backlog.push(new_batch(rollups, now, metrics))
            if dropped is not None:
                self._log_drop(dropped)
                self._count_dropped(calls_in(dropped), "memory_full")
            self._last_batch = now
        self._flush_backlog()
        return len(rollups)

    def _flush_backlog(self) -> None:
        """Move the batches kept in memory to the spool, oldest first, while it takes them."""
        wrote = False  # only a write proves the spool works again (an empty backlog does not)
        for batch_id in list(self._unremoved):
            try:
                self.spool.remove(batch_id)
            except SpoolError as e:
                self._spool_failed(e)
                return
            self._unremoved.discard(batch_id)
            wrote = True
        while len(self.backlog):
            batch = self.backlog.first()
            try:
                dropped = self.spool.append(batch)
            except SpoolError as e:
                self._spool_failed(e)
                return
            self.backlog.remove(batch)
            self._count_dropped(dropped, "spool_full")
            wrote = True
        n = self.spool_outage.ok() if wrote else None
        if n is not None:
            log.info("usage spool works again (%d failed operations while it did not)", n)

    def _spool_failed(self, e: SpoolError) -> None:
        if self.spool_outage.failed():  # once per outage, not once per batch
            log.error(
                "usage spool unusable (%s): keeping up to %d batches in memory until it works",
                e,
                self.backlog.max_batches,
            )

    def _count_dropped(self, calls: int, reason: str) -> None:
        """Calls whose usage records were dropped, in the live metrics (the
        next batch carries them): a sidecar outage past the bounds shows on
        ``/metrics``, not only in this process's log."""
        if calls and self.metrics is not None:
            self.metrics.count_extra(USAGE_DROPPED, calls, reason=reason)

    def _log_drop(self, dropped: dict[str, Any]) -> None:
        b = self.backlog
        if b.dropped == 1 or b.dropped % 100 == 0:
            log.error(
                "usage batches in memory over %d: dropped the oldest (%s, %d calls);"
                " %d batches (%d calls) dropped so far",
                b.max_batches,
                dropped.get("batch_id"),
                calls_in(dropped),
                b.dropped,
                b.dropped_calls,
            )

    async def deliver_spooled(self, max_batches: int = 50) -> bool:
        """Send spooled batches, oldest first, then those kept in memory; stop at
        the first failure."""
        try:
            spooled = self.spool.oldest(max_batches + len(self._unremoved))
        except SpoolError as e:  # unreadable: what memory holds can still go
            self._spool_failed(e)
            spooled = []
        self.spool.held = frozenset(batch_id for batch_id, _ in spooled)  # not trimmed meanwhile
        try:
            for batch_id, batch in spooled:
                if batch_id in self._unremoved:
                    continue
                if not await self._deliver(batch):
                    return False
                self.delivered += 1
                try:
                    self.spool.remove(batch_id)
                except SpoolError as e:
                    self._unremoved.add(batch_id)
                    self._spool_failed(e)
        finally:
            self.spool.held = frozenset()
        return await self._deliver_memory()

    async def _deliver_memory(self) -> bool:
        """Send the batches the spool could not take, oldest first; stop at the
        first failure. A batch sent twice (the run's delivery and the stop's
        overlapping) is counted once: the sidecar knows its ``batch_id``."""
        for batch in self.backlog:  # a copy, oldest first
            if not await self._deliver(batch):
                return False
            self.backlog.remove(batch)
            self.delivered += 1
        return True

    async def deliver_before_stop(self, timeout_s: float) -> int:
        """At a drained stop: spool what is left, and give what memory still
        holds (the spool could not take it) one last delivery, whatever the
        retry's back-off says: a sidecar back for a second takes them. The
        spooled batches wait for the next process. Returns how many went."""
        self.spool_pending()
        before = len(self.backlog)
        if not before:
            return 0
        try:
            async with asyncio.timeout(timeout_s):
                await self._deliver_memory()
        except TimeoutError:
            pass
        sent = before - len(self.backlog)
        if sent:
            log.info("usage: %d batches kept in memory delivered at stop", sent)
        return sent

    def lost_at_stop(self) -> None:
        """At stop: what memory still holds dies with the process; say so."""
        if len(self.backlog) and not self.backlog.calls():
            # counters of the last moments (the stop's own), no usage record
            log.warning(
                "usage: %d batches of live metrics (no calls) kept in memory not delivered at stop",
                len(self.backlog),
            )
        elif len(self.backlog):
            log.error(
                "usage spool unusable at stop: %d batches (%d calls) kept in memory are lost",
                len(self.backlog),
                self.backlog.calls(),
            )

    async def run(self) -> None:
        delay = self.flush_s
        retry_at = 0.0
        # a delivery in progress: it may take long (a slow or hanging sidecar,
        # 50 batches of catch-up), and records are spooled every flush meanwhile,
        # so a process killed outright loses at most its last flush_s of them
        delivering: asyncio.Future[bool] | None = None
        try:
            while True:
                if delivering is None:
                    await self._sleep(self.flush_s)
                try:
                    self.spool_pending()
                    if delivering is None:
                        if self._clock() < retry_at:
                            continue  # the sidecar refused lately: the next try waits its turn
                        delivering = asyncio.ensure_future(self.deliver_spooled())
                    done, _ = await asyncio.wait({delivering}, timeout=self.flush_s)
                    if not done:
                        continue  # still going: spool again, then wait for it again
                    task, delivering = delivering, None
                    ok = task.result()
                except asyncio.CancelledError:
                    raise
                except Exception:  # the shipper must outlive any one bad moment
                    log.exception("usage delivery failed unexpectedly")
                    ok, delivering = False, None
                if ok:
                    if self.failures:
                        log.info(
                            "usage delivery to the sidecar resumed (%d spooled)", len(self.spool)
                        )
                    self.failures = 0
                    delay = self.flush_s
                else:
                    self.failures += 1
                    if self.failures == 1 or self.failures % 10 == 0:
                        log.warning(
                            "sidecar not accepting usage; %d batch(es) spooled on disk, "
                            "%d in memory",
                            len(self.spool),
                            len(self.backlog),
                        )
                    delay = min(self.max_retry_s, max(self.flush_s, delay * 2))
                    retry_at = self._clock() + delay
        finally:
            if delivering is not None:
                delivering.cancel()
