"""``chain_getHead`` answered from a live new-heads subscription.

Clients such as async-substrate-interface and bittensor ask ``chain_getHead``
before nearly every read: at five clients and a dozen reads per block, most of
the calls the nodes see are that one question, and a node answers it with the
block it announced on its new-heads subscription moments before. While one of
the hub's shared new-heads subscriptions of a network is live (a client's, a
follow view's, or this watch's own), the best head the proxy knows
(``addon/chain/head_book.py``, learned from every head the subscription
delivers) is the answer, with no upstream call. Head pinning pins reads to the
same head, so a client's head and its reads at it agree.

The head is used only when ``HeadBook.fresh`` would pin to it: seen within
``head_pinning.max_age_s``, not distrusted, no newer hash shown without its
header, and not behind the probes' tip (a node whose subscription went quiet
while the chain moved on is caught there, before the silence watchdog moves
the subscription). Otherwise the call goes upstream as before.

A network whose clients ask ``chain_getHead`` again within ``linger_s`` of the
last time, with no live new-heads subscription, gets one of this watch's own
(one upstream subscription per network and process, as one client's would
cost); it is left once nobody has asked for ``linger_s``. ``WatchDemand`` is
that decision, pure; ``HeadWatch`` holds the subscriptions.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from mitmproxy.utils.asyncio_utils import create_task

from addon.rpc.sub_methods import SUBSCRIBE
from addon.subs.hub import OWN_PREFIX, NoUpstream, OwnSubscriber, SubscriptionHub

log = logging.getLogger("chainproxy.subs")

NEW_HEADS = SUBSCRIBE["chain_subscribeNewHeads"]


@dataclass(slots=True)
class WatchDemand:
    """When a network's ``chain_getHead`` askers justify a subscription (pure)."""

    linger_s: float
    asked: dict[str, float] = field(default_factory=dict)  # network: last time asked

    def ask(self, network: str, now: float) -> bool:
        """One more ``chain_getHead`` of ``network`` went upstream; True when it
        was asked before within ``linger_s`` (then a watch pays for itself)."""
        last = self.asked.get(network)
        self.asked[network] = now
        return last is not None and now - last <= self.linger_s

    def seen(self, network: str, now: float) -> None:
        """One was answered from the watch: the watch is still wanted."""
        self.asked[network] = now

    def idle(self, network: str, now: float) -> bool:
        """Nobody asked for ``linger_s``: the watch may go."""
        last = self.asked.get(network)
        return last is None or now - last > self.linger_s


class HeadWatch:
    def __init__(
        self,
        hub: SubscriptionHub,
        clock: Callable[[], float],
        linger_s: float = 30.0,
    ) -> None:
        self.hub = hub
        self.clock = clock
        self.demand = WatchDemand(linger_s)
        self._owners: dict[str, OwnSubscriber] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def live(self, network: str) -> bool:
        """Whether a shared new-heads subscription of ``network`` holds on a node
        and has delivered a head (then the head book follows the chain)."""
        return self.hub.heads_live(network)

    def answered(self, network: str) -> None:
        self.demand.seen(network, self.clock())

    def asked(self, network: str) -> None:
        """A ``chain_getHead`` went upstream: start a watch when it pays."""
        if not self.demand.ask(network, self.clock()) or network in self._owners:
            return
        if not self.hub.serves(network):
            return  # no node-wss endpoint: nothing to subscribe on
        owner = OwnSubscriber(client=f"{OWN_PREFIX}head-watch:{network}")
        self._owners[network] = owner
        create_task(self._start(network, owner), name="head watch", keep_ref=True)

    async def _start(self, network: str, owner: OwnSubscriber) -> None:
        try:
            shared, sub = await self.hub.subscribe(network, NEW_HEADS, [], _drop, owner)
        except NoUpstream as e:
            log.info("%s: no head watch: %s", network, e)
            self._forget(network, owner)
            return
        except Exception:  # never leave the network marked as watched for nothing
            log.exception("%s: the head watch could not subscribe", network)
            self._forget(network, owner)
            return
        if self._owners.get(network) is not owner:  # closed while it was being set up
            self.hub.unsubscribe(sub.sub_id, owner)
            return
        owner.subscriptions[sub.sub_id] = NEW_HEADS.subscribe
        shared.greet(sub)
        self._arm(network)

    def _forget(self, network: str, owner: OwnSubscriber) -> None:
        if self._owners.get(network) is owner:
            del self._owners[network]  # the next asker may try again

    def _arm(self, network: str) -> None:
        loop = asyncio.get_running_loop()
        self._timers[network] = loop.call_later(self.demand.linger_s, self._check, network)

    def _check(self, network: str) -> None:
        if not self.demand.idle(network, self.clock()):
            self._arm(network)
            return
        self._timers.pop(network, None)
        self._end(network)

    def _end(self, network: str) -> None:
        owner = self._owners.pop(network, None)
        if owner is None:
            return
        for sub_id in list(owner.subscriptions):
            self.hub.unsubscribe(sub_id, owner)
        owner.subscriptions.clear()

    def watching(self) -> frozenset[str]:
        """The networks with a watch of their own (held or being set up)."""
        return frozenset(self._owners)

    def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for network in list(self._owners):
            self._end(network)


def _drop(frame: bytes) -> None:
    """The watch needs no frames: the hub tells the head book each head."""
