"""The addon's view of the upstreams of one network, and the choice among them.

Tiers are tried in order: healthy and synced, healthy but lagging, not yet
probed, unhealthy; an upstream the addon itself ejected (K failures in a row)
sinks below all of them until its cool-down ends. Within the best tier the
choice is power-of-two-choices over cost = decayed EWMA latency x (in-flight
+ 1) / score: cheap, load-aware, and it sends a slow node clearly less than
an equal share without starving it of the requests that re-measure it.

The latency estimate is also at least the age of the oldest call still in
flight on that upstream: a node that has just turned slow shows it while its
first slow call is still waiting, not only once it has come back (until then
the EWMA still says "fast" and the node keeps attracting calls). An attempt a
hedge outraced stays in flight until it ends, and then teaches its real
latency (``forward.py``).

A read that needs the state at a block (``state_block``) goes only to
upstreams that do not lack it, those known to hold it first
(``horizons.py``).
"""

from __future__ import annotations

import logging
import math
import random
from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from addon.chain.horizons import coverage
from addon.upstream.backoff import backoff_s
from common.config import Endpoint

log = logging.getLogger("chainproxy.upstreams")

TIER_SYNCED = 0
TIER_LAGGING = 1
TIER_UNPROBED = 2
TIER_UNHEALTHY = 3
TIER_EJECTED = 4

_EWMA_ALPHA = 0.3
# An idle upstream's latency estimate fades with this time constant, so a node
# that was slow once is tried again now and then and can earn its share back.
_DECAY_S = 10.0
# A failure counts as at least this slow: a node that fails fast must not look
# like the fastest node and attract traffic until it is ejected.
_FAILURE_PENALTY_MS = 1000.0
# A node at its budget costs this many times more than an idle one (plus one):
# calls spread to nodes with room before any has to wait.
_BUDGET_WEIGHT = 3.0


@dataclass(slots=True)
class Upstream:
    id: str
    url: str  # full URL, may hold a secret: never log it
    provider: str
    archive: bool
    configured_archive: bool = False  # what the config says, when no snapshot does
    tier: int = TIER_UNPROBED
    score: float = 1.0
    best: int | None = None  # best block the sidecar last saw on it
    finalized: int | None = None  # its finalized height, as the sidecar last saw it
    ewma_ms: float = 0.0  # optimistic start: a new upstream gets measured soon
    updated_at: float = 0.0
    inflight: int = 0
    inflight_starts: list[float] = field(default_factory=list)  # ascending start times
    heavy_inflight: int = 0  # of ``inflight``, reads priced by their bytes (1 MiB answers)
    consecutive_failures: int = 0
    ejected_until: float = 0.0
    requests: int = 0
    failures: int = 0
    # "too many requests": no client traffic until then (``throttled``)
    backoff_until: float = 0.0
    backoff_reason: str = ""
    backoff_strikes: int = 0  # 429s in a row: the next pause doubles
    quarantined: bool = False  # outvoted by a cross-check: no client calls until it agrees
    foreign: bool = False  # the sidecar found it on another chain: never chosen until cleared
    # its state horizon, from the routing snapshot (``horizons.py``)
    horizon: int | None = None  # the earliest block whose state it is known to hold
    horizon_lost: int | None = None  # the latest block known to be without state
    keeps: int | None = None  # it keeps the state of its last K blocks
    horizon_rounds: int = 0  # the sidecar's rounds of state checks so far
    lost_seen: int | None = None  # this process saw it answer "state discarded" up to here
    lost_seen_round: int = 0  # ``horizon_rounds`` when it did

    @classmethod
    def from_endpoint(cls, e: Endpoint) -> Upstream:
        return cls(
            id=e.id, url=e.url, provider=e.provider, archive=e.archive, configured_archive=e.archive
        )


class UpstreamPool:
    def __init__(
        self,
        upstreams: Iterable[Upstream],
        *,
        eject_after: int,
        eject_cooldown_s: float,
        clock: Callable[[], float],
        rng: random.Random | None = None,
        max_backoff_s: float = 300.0,
    ) -> None:
        self.upstreams: dict[str, Upstream] = {u.id: u for u in upstreams}
        self.eject_after = eject_after
        self.eject_cooldown_s = eject_cooldown_s
        self.max_backoff_s = max_backoff_s
        # how much of its budget a node has used (0..1), when budgets are kept:
        # a node near its budget is the dearer choice
        self.budget_use: Callable[[str], float] | None = None
        self.tip: int | None = None  # the network's tip, from the snapshot (horizons move)
        self._clock = clock
        self._rng = rng or random.Random()

    def inherit(self, old: UpstreamPool) -> None:
        """Health and latency of the upstreams both pools know (a config reload)."""
        for uid, up in self.upstreams.items():
            prev = old.upstreams.get(uid)
            if prev is None:
                continue
            if prev.tier != TIER_UNPROBED:  # a snapshot had spoken for it
                up.tier, up.score, up.best, up.finalized, up.archive = (
                    prev.tier,
                    prev.score,
                    prev.best,
                    prev.finalized,
                    prev.archive,
                )
            up.horizon, up.horizon_lost, up.keeps, up.horizon_rounds = (
                prev.horizon,
                prev.horizon_lost,
                prev.keeps,
                prev.horizon_rounds,
            )
            up.lost_seen, up.lost_seen_round = prev.lost_seen, prev.lost_seen_round
            up.ewma_ms, up.updated_at = prev.ewma_ms, prev.updated_at
            up.consecutive_failures, up.ejected_until = (
                prev.consecutive_failures,
                prev.ejected_until,
            )
            up.quarantined = prev.quarantined
            up.backoff_until, up.backoff_reason, up.backoff_strikes = (
                prev.backoff_until,
                prev.backoff_reason,
                prev.backoff_strikes,
            )

    def __len__(self) -> int:
        return len(self.upstreams)

    def effective_tier(self, u: Upstream, now: float) -> int:
        return TIER_EJECTED if u.ejected_until > now else u.tier

    def ejected(self, u: Upstream) -> bool:
        """Failing now (its calls failed, or the sidecar found it down): tried
        only when no other node is left."""
        return self.effective_tier(u, self._clock()) == TIER_EJECTED

    def cost(self, u: Upstream, now: float) -> float:
        age = max(0.0, now - u.updated_at)
        latency = u.ewma_ms * math.exp(-age / _DECAY_S)
        if u.inflight_starts:
            latency = max(latency, (now - u.inflight_starts[0]) * 1000)
        cost = (latency + 1.0) * (u.inflight + 1) / max(u.score, 0.01)
        if self.budget_use is not None:
            cost *= 1.0 + _BUDGET_WEIGHT * self.budget_use(u.id)
        return cost

    def choose(
        self,
        exclude: set[str],
        *,
        prefer_archive: bool = False,
        min_block: int | None = None,
        state_block: int | None = None,
        light: bool = False,
        spread: bool = False,
    ) -> Upstream | None:
        """The next upstream to try. ``min_block``: the call needs that height, so
        upstreams known to be below it are passed over while any other is left
        (and if none is known to have it, the most advanced are tried first).
        ``state_block``: the call reads the state at that block: upstreams that
        lack it are never chosen, those known to hold it first (``prefer_archive``
        then says nothing more).
        ``light``: a small read goes, within the best tier, to a node with no
        heavy read in flight while there is one (a node streaming a 1 MiB
        answer answers a small call behind it). ``spread``: within the best
        tier, the node using the least of its budget (the cheaper of equals),
        not the cheaper of two: the calls a tight budget leaves over spread
        evenly instead of filling the fastest node to its limit."""
        now = self._clock()
        candidates = [
            u
            for u in self.upstreams.values()
            if u.id not in exclude
            and u.backoff_until <= now
            and not u.quarantined
            and not u.foreign
        ]
        if not candidates:
            return None
        if min_block is not None:
            high = [u for u in candidates if u.best is None or u.best >= min_block]
            if not high:  # nobody is known to have it yet: the most advanced may
                top = max(u.best for u in candidates if u.best is not None)
                high = [u for u in candidates if u.best == top]
            candidates = high
        if state_block is not None:
            cover = {u.id: coverage(u, state_block, self.tip) for u in candidates}
            candidates = [u for u in candidates if cover[u.id] != "lacks"]
            if not candidates:
                return None
            holding = [u for u in candidates if cover[u.id] == "holds"]
            candidates = holding or candidates
        elif prefer_archive and any(u.archive for u in candidates):
            candidates = [u for u in candidates if u.archive]
        best_tier = min(self.effective_tier(u, now) for u in candidates)
        tier = [u for u in candidates if self.effective_tier(u, now) == best_tier]
        if light and len(tier) > 1:
            calm = [u for u in tier if not u.heavy_inflight]
            tier = calm or tier
        if len(tier) == 1:
            return tier[0]
        if spread and self.budget_use is not None:
            use = self.budget_use
            return min(tier, key=lambda u: (use(u.id), self.cost(u, now)))
        a, b = self._rng.sample(tier, 2)
        return a if self.cost(a, now) <= self.cost(b, now) else b

    def paused(self, exclude: set[str]) -> dict[str, float]:
        """The other upstreams backing off (a node's Retry-After): seconds left each."""
        now = self._clock()
        return {
            u.id: u.backoff_until - now
            for u in self.upstreams.values()
            if u.id not in exclude and u.backoff_until > now
        }

    def backoff_left(self, exclude: set[str]) -> float | None:
        """Seconds until the first of the other upstreams backing off may be
        sent calls again (None: none of them is backing off)."""
        return min(self.paused(exclude).values(), default=None)

    def back_in(self, refused: set[str]) -> float | None:
        """After the nodes in ``refused`` each refused a call for their limits:
        seconds until the first node may take calls again. None when one of
        them is not paused: only its learned rate paces it, so it takes calls
        again soon, whatever another node's Retry-After says."""
        paused = self.paused(set())
        if any(uid not in paused for uid in refused):
            return None
        return min(paused.values(), default=None)

    # --- outcomes reported by the forwarder ------------------------------------------------

    def started(self, u: Upstream, heavy: bool = False) -> None:
        u.inflight += 1
        u.heavy_inflight += heavy
        u.requests += 1
        u.inflight_starts.append(self._clock())  # the clock never goes back: stays sorted

    def heavy_ended(self, u: Upstream) -> None:
        """A heavy read started with ``started(u, heavy=True)`` ended (whatever its outcome)."""
        u.heavy_inflight = max(0, u.heavy_inflight - 1)

    def _settle(self, u: Upstream, latency_ms: float | None) -> None:
        """One call in flight ended, ``latency_ms`` after it started (None: unknown)."""
        u.inflight = max(0, u.inflight - 1)
        starts = u.inflight_starts
        if not starts:
            return
        if u.inflight == 0:
            starts.clear()
        elif latency_ms is None:
            starts.pop()  # keep the oldest: the conservative choice
        else:
            # the entry of this call: the start time nearest to now - latency
            t = self._clock() - latency_ms / 1000
            i = bisect_left(starts, t)
            if i == len(starts) or (i > 0 and t - starts[i - 1] <= starts[i] - t):
                i -= 1
            del starts[i]

    def abandoned(self, u: Upstream, latency_ms: float | None = None) -> None:
        """The attempt ended without an outcome (cancelled): no health verdict."""
        self._settle(u, latency_ms)

    def succeeded(self, u: Upstream, latency_ms: float) -> None:
        self._settle(u, latency_ms)
        u.consecutive_failures = 0
        u.backoff_strikes = 0
        self._observe(u, latency_ms)

    def failed(self, u: Upstream, latency_ms: float) -> None:
        now = self._clock()
        self._settle(u, latency_ms)
        u.failures += 1
        u.consecutive_failures += 1
        self._observe(u, max(latency_ms, _FAILURE_PENALTY_MS))
        if u.consecutive_failures >= self.eject_after and u.ejected_until <= now:
            u.ejected_until = now + self.eject_cooldown_s
            log.warning(
                "upstream %s (%s) ejected for %.0fs after %d consecutive failures",
                u.id,
                u.provider,
                self.eject_cooldown_s,
                u.consecutive_failures,
            )

    def quarantine(self, u: Upstream) -> bool:
        """Outvoted by a cross-check (``cross_check.py``): no client calls. Never
        the last node left: a pool with one node cannot outvote it. True when
        it was not quarantined before."""
        if u.quarantined or all(o.quarantined for o in self.upstreams.values() if o is not u):
            return False
        u.quarantined = True
        return True

    def readmit(self, u: Upstream) -> None:
        u.quarantined = False

    def throttled(
        self, u: Upstream, latency_ms: float, retry_after: float | None, reason: str
    ) -> float:
        """The node said "too many requests" (429, or 503 with Retry-After): no
        client call until its pause ends. Not a failure: it is not ejected for
        it, and its latency estimate is left alone (a fast 429 is not speed).
        Returns the pause in seconds."""
        self._settle(u, latency_ms)
        return self.pause(u, retry_after, reason)

    def refused(self, u: Upstream, latency_ms: float) -> None:
        """The node said "too many requests" and a learned rate answers it
        (``budgets.py``): the attempt ended, the node is neither failed nor
        paused (its rate holds its excess back, the rest keeps going)."""
        self._settle(u, latency_ms)

    def pause(self, u: Upstream, retry_after: float | None, reason: str) -> float:
        """No client call for the node until its pause ends (see ``throttled``)."""
        now = self._clock()
        u.backoff_strikes += 1
        pause = backoff_s(u.backoff_strikes, retry_after, self.max_backoff_s)
        if now + pause > u.backoff_until:
            if u.backoff_until <= now:  # one line per pause, not per call in it
                log.warning(
                    "upstream %s (%s) backing off for %.1fs: %s%s",
                    u.id,
                    u.provider,
                    pause,
                    reason,
                    "" if retry_after is None else f" (Retry-After {retry_after:g}s)",
                )
            u.backoff_until = now + pause
            u.backoff_reason = reason
        return pause

    def _observe(self, u: Upstream, latency_ms: float) -> None:
        now = self._clock()
        if u.updated_at == 0.0:
            u.ewma_ms = latency_ms
        else:
            u.ewma_ms = _EWMA_ALPHA * latency_ms + (1 - _EWMA_ALPHA) * u.ewma_ms
        u.updated_at = now
