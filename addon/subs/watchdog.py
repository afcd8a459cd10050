"""The subscription hub's watchdog (``SubscriptionHub`` is one): a shared
head subscription whose node turned unhealthy while a better one exists
moves; a silent socket (``addon/subs/silence.py``: no head for ``stall_s``
while the network advanced) has all of its subscriptions moved and its node
marked silent until its canary hears it push again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from addon.subs.fanout import SharedSubscription
from addon.subs.silence import SilentNodes, evidence, judge
from addon.subs.upstream import UpstreamSocket
from addon.upstream.pool import TIER_LAGGING, UpstreamPool

if TYPE_CHECKING:
    from addon.subs.hub import ChainView, HubSettings

log = logging.getLogger("chainproxy.subs")


class Watchdog:
    """The hub's rounds over its shared subscriptions (a mixin: the state is the hub's)."""

    shared: dict[str, SharedSubscription]
    pools: Mapping[str, UpstreamPool]
    chain: ChainView
    settings: HubSettings
    silent: SilentNodes
    _clock: Callable[[], float]
    _watchdog: asyncio.Task[None] | None

    def _move(self, sh: SharedSubscription, reason: str, canary: bool = False) -> None:
        raise NotImplementedError

    def _unsubscribe_upstream(
        self, socket: UpstreamSocket, sub: str, method: str
    ) -> Coroutine[Any, Any, None]:
        raise NotImplementedError

    def _ensure_watchdog(self) -> None:
        if self._watchdog is None or self._watchdog.done():
            self._watchdog = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        period = max(0.2, min(2.0, self.settings.stall_s / 4))
        while self.shared:
            await asyncio.sleep(period)
            self.check()

    def check(self) -> None:
        """One round of the watchdog: subscriptions on an unhealthy node move;
        a silent socket's subscriptions all move, and its node is marked."""
        silent: dict[UpstreamSocket, str] = {}
        for sh in list(self.shared.values()):
            reason = self.stale(sh)
            if not reason:
                continue
            if sh.upstream is not None:
                self.pools[sh.network].failed(sh.upstream, 1000.0)
            if sh.socket is not None and reason.startswith("silent"):
                silent.setdefault(sh.socket, reason)
            else:
                self._move(sh, reason)
        for socket, reason in silent.items():
            eid = socket.endpoint_id
            for sh in [sh for sh in self.shared.values() if sh.socket is socket]:
                # one head subscription stays on the node as its canary, to hear it again
                self._move(sh, reason, canary=sh.kind.heads and eid not in self.silent.canaries)
            if eid in self.silent.since:
                log.warning(
                    "upstream %s is silent (%s): avoided for subscriptions until it pushes again",
                    eid,
                    reason,
                )
                self.chain.upstream_silent(eid)

    def stale(self, sh: SharedSubscription) -> str:
        """Why ``sh`` should leave its node now ("" when it should not)."""
        pool = self.pools.get(sh.network)
        if pool is None or sh.upstream is None:
            return ""
        now = self._clock()
        foreign = sh.upstream.foreign
        if foreign or pool.effective_tier(sh.upstream, now) > TIER_LAGGING:
            # every kind: a node that hangs (no reset) pushes storage changes
            # no more than heads, and its socket errs only at the heartbeat;
            # moved only to a node the move itself would take (no back and forth)
            alt = pool.choose({sh.upstream.id} | self.silent.avoid())
            if alt is not None and pool.effective_tier(alt, now) <= TIER_LAGGING:
                return "wrong chain" if foreign else "node unhealthy"
        if sh.last_at is None or not sh.kind.heads:
            return ""
        tip, finalized = self.chain.heights(sh.network)
        heads = [
            (o.kind.kind, getattr(o.sequencer, "last", None))
            for o in self.shared.values()
            if o.network == sh.network and o.kind.heads
        ]
        best, fin = evidence(tip, finalized, heads)
        seen = getattr(sh.sequencer, "last", None)
        return judge(sh.kind.kind, seen, now - sh.last_at, self.settings.stall_s, best, fin)

    def distrust(self, sh: SharedSubscription, reason: str) -> None:
        """A reader of ``sh``'s heads judged them wrong (the follow view: a
        node on another fork): it moves to another node, as from a node that
        died; the node stays in the pool for calls."""
        if self.shared.get(sh.key) is sh and sh.upstream is not None:
            self._move(sh, reason)

    def _spoke(self, socket: UpstreamSocket) -> None:
        """A silent node's canary heard a notification: it pushes again."""
        canary = self.silent.spoke(socket.endpoint_id, socket)
        if canary is not None:
            log.warning("upstream %s pushes again: no longer avoided", socket.endpoint_id)
            asyncio.get_running_loop().create_task(
                self._unsubscribe_upstream(canary.socket, canary.sub, canary.unsubscribe)
            )
