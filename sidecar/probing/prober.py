"""The probe scheduler: full probes every ``interval_s`` and head tracking of
node endpoints every ``head_interval_s``, both with jitter, at most
``concurrency`` probes at once, each bounded by its own timeout, so a hung
endpoint never stalls another probe or the loop.

An endpoint that has never answered a probe is probed again sooner (after
1 s, then 2, 4 ... s up to its interval): a first probe that failed does not
leave it unknown for a whole interval.

Results update per-endpoint ``Health`` (flap-damped) and are written to the
store in batches; the runtime a head probe read goes to the ``ChainRuntimeBook``
(``sidecar.probing.chain_runtime``), once the health has taken the result.

After a node's full probe answered, the same slot checks the state at the few
blocks its horizon plans (``state_probe``, ``sidecar.probing.probes.state``;
a block the proxies reported the node "discarded" first) and folds them,
with the full probe's archive check, into the node's horizon
(``sidecar.probing.horizon``).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace

from common.config import Endpoint, ProbeConfig
from sidecar.probing.chain_runtime import ChainRuntimeBook
from sidecar.probing.health import Health, Transition, apply
from sidecar.probing.horizon import observe as observe_horizon
from sidecar.probing.horizon import plan as plan_horizon
from sidecar.probing.results import NODE_KINDS, TIMEOUT, WRONG_CHAIN, ProbeKind, ProbeResult
from sidecar.probing.store import Store

log = logging.getLogger("chainproxy.sidecar.prober")

ProbeFn = Callable[[Endpoint, ProbeKind], Awaitable[ProbeResult]]
# the state at these blocks: (block, held) for those the node answered clearly
StateProbeFn = Callable[[Endpoint, tuple[int, ...]], Awaitable[tuple[tuple[int, bool], ...]]]
# the latest block the proxies saw a node answer "state discarded" for, if any
Reported = Callable[[str], int | None]
TransitionHook = Callable[[Endpoint, Health, Transition, ProbeResult], None]

_JITTER = 0.1
_FLUSH_S = 1.0
_GRACE_S = 1.0  # beyond the probe timeout before the scheduler gives up on a probe
# An endpoint that has never answered a probe is tried again after this, then
# twice as long after each failure, up to its interval (``_next_delay``).
FIRST_RETRY_S = 1.0
PROBE_ERROR = "probe-error"
_FULL_ONLY_FAILURES = frozenset({WRONG_CHAIN})
_RECENT = 20  # probes kept in memory per endpoint for the API
_MAX_RESULT_SERIES = 10_000


@dataclass(order=True, slots=True)
class _Due:
    at: float
    seq: int
    endpoint_id: str
    kind: ProbeKind


class Prober:
    def __init__(
        self,
        endpoints: Iterable[Endpoint],
        probe: ProbeFn,
        config: ProbeConfig,
        store: Store | None,
        *,
        clock: Callable[[], float],
        monotonic: Callable[[], float] = time.monotonic,
        concurrency: int = 32,
        rng: random.Random | None = None,
        on_transition: TransitionHook | None = None,
        chain_runtimes: ChainRuntimeBook | None = None,
        state_probe: StateProbeFn | None = None,
        reported: Reported | None = None,
    ) -> None:
        self.endpoints = {e.id: e for e in endpoints}
        self.chain_runtimes = chain_runtimes  # each network's runtime, from the head probes
        self.config = config
        self.store = store
        self.health: dict[str, Health] = {}
        self.recent: dict[str, deque[ProbeResult]] = {
            eid: deque(maxlen=_RECENT) for eid in self.endpoints
        }
        if store is not None:
            known = store.load_health()
            self.health = {eid: h for eid, h in known.items() if eid in self.endpoints}
            for eid, probes in self.recent.items():
                probes.extend(reversed(store.recent_probes(eid, _RECENT)))
        self._probe = probe
        self._state_probe = state_probe  # None: horizons from the archive check alone
        self._reported = reported
        self._clock = clock  # wall time: probe timestamps, retention
        self._mono = monotonic  # scheduling: immune to wall-clock steps
        self._rng = rng or random.Random()
        self._wakeup = asyncio.Event()
        self._sem = asyncio.Semaphore(concurrency)
        self._queue: list[_Due] = []
        self._seq = itertools.count()
        self._tasks: set[asyncio.Task[None]] = set()
        self._pending: list[ProbeResult] = []
        self._dirty: set[str] = set()
        self._on_transition = on_transition
        self._sticky: dict[str, str] = {}  # full-probe failures head probes cannot see
        self.probes_run = 0
        # (endpoint id, probe kind, classification) -> probes, for /metrics; bounded
        # (_MAX_RESULT_SERIES) though classifications such as "http-404" are free text.
        self.results: dict[tuple[str, str, str], int] = {}
        self.changed = asyncio.Event()  # set whenever health changes (tests, API)

    def health_of(self, endpoint_id: str) -> Health:
        return self.health.get(endpoint_id, Health())

    def _schedule(self, endpoint_id: str, kind: ProbeKind, delay: float) -> None:
        jittered = delay * (1 + self._rng.uniform(-_JITTER, _JITTER))
        due = _Due(self._mono() + jittered, next(self._seq), endpoint_id, kind)
        heapq.heappush(self._queue, due)
        self._wakeup.set()  # the loop may be sleeping towards a later item

    def _initial_schedule(self) -> None:
        # Spread the first round over a second so start-up is not a thundering herd.
        for e in self.endpoints.values():
            self._schedule(e.id, "full", self._rng.uniform(0, 1.0))
            if e.kind in NODE_KINDS:
                self._schedule(e.id, "head", self.config.head_interval_s)

    async def run(self) -> None:
        self._initial_schedule()
        last_flush = self._mono()
        try:
            while True:
                now = self._mono()
                while self._queue and self._queue[0].at <= now:
                    due = heapq.heappop(self._queue)
                    self._start(due)
                if now - last_flush >= _FLUSH_S:
                    self.flush()
                    last_flush = now
                wait = _FLUSH_S
                if self._queue:
                    wait = min(wait, max(0.0, self._queue[0].at - now))
                self._wakeup.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), timeout=wait)
        finally:
            for t in self._tasks:
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            self.flush()

    def _start(self, due: _Due) -> None:
        endpoint = self.endpoints.get(due.endpoint_id)
        if endpoint is None:
            return
        task = asyncio.create_task(self._run_one(endpoint, due.kind))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run_one(self, endpoint: Endpoint, kind: ProbeKind) -> None:
        interval = self.config.interval_s if kind == "full" else self.config.head_interval_s
        try:
            async with self._sem:
                at = self._clock()
                try:
                    # Probes bound themselves; this is the scheduler's own guarantee
                    # that a slot is never held for longer.
                    async with asyncio.timeout(self.config.timeout_s + _GRACE_S):
                        result = await self._probe(endpoint, kind)
                except TimeoutError:
                    result = ProbeResult(endpoint.id, at, kind, TIMEOUT, detail="probe overran")
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # a probe bug must not freeze this endpoint's health
                    log.exception("probe of %s (%s) failed unexpectedly", endpoint.id, kind)
                    result = ProbeResult(
                        endpoint.id, at, kind, PROBE_ERROR, detail=type(e).__name__
                    )
                checks = await self._check_state(endpoint, result)
            self.observe(endpoint, result)
            if result.kind == "full" and result.ok and result.best is not None:
                self.observe_state(endpoint, result.best, checks, archive=result.archive)
        finally:
            self._schedule(endpoint.id, kind, self._next_delay(endpoint.id, interval))

    def _next_delay(self, endpoint_id: str, interval: float) -> float:
        """The interval; sooner while the endpoint has never answered a probe.
        A first probe that failed (one that timed out while everything was
        starting) is tried again after ``FIRST_RETRY_S``, then 2, 4 ... s up to
        the interval: nothing is known of such an endpoint (no height, not
        routed as probed), and that must not last a whole interval (a minute)."""
        h = self.health_of(endpoint_id)
        if h.last_ok_at is not None or h.consecutive_failures == 0:
            return interval
        return min(interval, FIRST_RETRY_S * 2 ** min(h.consecutive_failures - 1, 16))

    async def _check_state(
        self, endpoint: Endpoint, result: ProbeResult
    ) -> tuple[tuple[int, bool], ...]:
        """After a node's full probe answered: the state at the blocks its
        horizon plans (nothing to check, or no state probe: no reading)."""
        if self._state_probe is None or result.kind != "full" or not result.ok:
            return ()
        if result.archive:  # block 1's state held: an archive, nothing more to check
            return ()
        if endpoint.kind not in NODE_KINDS:
            return ()
        reported = self._reported(endpoint.id) if self._reported is not None else None
        blocks = plan_horizon(self.health_of(endpoint.id).horizon, result.best, reported)
        if not blocks:
            return ()
        try:
            async with asyncio.timeout(self.config.timeout_s + _GRACE_S):
                return await self._state_probe(endpoint, blocks)
        except TimeoutError:
            return ()
        except Exception:  # a bug must not stop the probes of this endpoint
            log.exception("state checks of %s failed unexpectedly", endpoint.id)
            return ()

    def observe_state(
        self,
        endpoint: Endpoint,
        best: int,
        checks: tuple[tuple[int, bool], ...],
        *,
        archive: bool | None = None,
    ) -> None:
        """Fold a round's state readings (and the archive check) into the
        node's horizon."""
        old = self.health_of(endpoint.id)
        horizon = observe_horizon(old.horizon, best, checks, archive)
        if horizon != old.horizon:
            self.health[endpoint.id] = replace(old, horizon=horizon)
            self._dirty.add(endpoint.id)
            self.changed.set()

    def observe(self, endpoint: Endpoint, result: ProbeResult) -> Transition:
        """Fold one probe result into the endpoint's health."""
        self.probes_run += 1
        result = self._carry_full_verdict(endpoint.id, result)
        old = self.health_of(endpoint.id)
        new, transition = apply(
            old,
            result,
            fail_threshold=self.config.fail_threshold,
            recover_threshold=self.config.recover_threshold,
        )
        self.health[endpoint.id] = new
        self._count(result)
        self.recent.setdefault(endpoint.id, deque(maxlen=_RECENT)).append(result)
        self._pending.append(result)
        self._dirty.add(endpoint.id)
        if self.chain_runtimes is not None and result.spec_version is not None:
            self.chain_runtimes.observe(endpoint, result, self.health)
        if transition is not None:
            log.warning(
                "%s %s (%s, %s): %s",
                endpoint.id,
                transition,
                endpoint.provider,
                endpoint.kind,
                result.classification,
            )
            if self._on_transition is not None:
                self._on_transition(endpoint, new, transition, result)
        self.changed.set()
        return transition

    def _count(self, result: ProbeResult) -> None:
        """Count the result as the endpoint's health took it (after a head probe
        inherited the last full probe's verdict): what the dashboard shows."""
        key = (result.endpoint_id, result.kind, result.classification)
        if key in self.results:
            self.results[key] += 1
        elif len(self.results) < _MAX_RESULT_SERIES:
            self.results[key] = 1

    def _carry_full_verdict(self, endpoint_id: str, result: ProbeResult) -> ProbeResult:
        """Head probes do not check the genesis: until a full probe says otherwise,
        a node on the wrong chain stays failed, or it would never turn Degraded."""
        if result.kind == "full":
            if result.classification in _FULL_ONLY_FAILURES:
                self._sticky[endpoint_id] = result.classification
            else:
                self._sticky.pop(endpoint_id, None)
        elif endpoint_id in self._sticky:
            # a failed head probe too: its own reason would clear the verdict
            # and make the node a last resort for calls again
            detail = "head live" if result.ok else f"head probe {result.classification}"
            result = replace(
                result,
                classification=self._sticky[endpoint_id],
                detail=f"{detail}; the last full probe failed",
            )
        return result

    def flush(self) -> None:
        if self.store is None or not (self._pending or self._dirty):
            return
        pending, self._pending = self._pending, []
        dirty = {eid: self.health[eid] for eid in self._dirty if eid in self.health}
        self._dirty = set()
        self.store.record(pending, dirty, self._clock())
