"""The head watch: when ``chain_getHead`` askers justify a new-heads
subscription of the proxy's own (pure ``WatchDemand``), and ``HeadWatch``
holding and leaving it on a fake hub."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from addon.subs.head_watch import HeadWatch, WatchDemand
from addon.subs.hub import NoUpstream


def test_a_second_ask_within_the_linger_justifies_a_watch() -> None:
    d = WatchDemand(linger_s=30)
    assert not d.ask("finney", 100.0)  # once: a node answers, no subscription for it
    assert d.ask("finney", 129.0)  # again within 30 s
    assert not d.ask("test", 129.0)  # per network
    assert not d.ask("finney", 170.0)  # 41 s after the last: starts over


def test_a_watch_is_idle_once_nobody_asked_for_the_linger() -> None:
    d = WatchDemand(linger_s=30)
    assert d.idle("finney", 0.0)
    d.ask("finney", 100.0)
    d.seen("finney", 120.0)  # answered from the watch: still wanted
    assert not d.idle("finney", 150.0)
    assert d.idle("finney", 150.5)


@dataclass
class _Shared:
    greeted: list[Any] = field(default_factory=list)

    def greet(self, sub: Any) -> None:
        self.greeted.append(sub)


@dataclass
class _Sub:
    sub_id: str


@dataclass
class FakeHub:
    served: bool = True
    fail: bool = False
    subscribed: list[tuple[str, str]] = field(default_factory=list)
    unsubscribed: list[str] = field(default_factory=list)
    live_networks: set[str] = field(default_factory=set)

    def serves(self, network: str) -> bool:
        return self.served

    def heads_live(self, network: str) -> bool:
        return network in self.live_networks

    async def subscribe(
        self, network: str, kind: Any, params: list[Any], send: Any, owner: Any
    ) -> tuple[_Shared, _Sub]:
        await asyncio.sleep(0)
        if self.fail:
            raise NoUpstream("no node took it")
        self.subscribed.append((network, kind.subscribe))
        return _Shared(), _Sub(f"s{len(self.subscribed)}")

    def unsubscribe(self, sub_id: str, owner: Any) -> bool:
        self.unsubscribed.append(sub_id)
        return True


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_the_second_ask_subscribes_once_and_idleness_unsubscribes() -> None:
    hub, clock = FakeHub(), Clock()
    watch = HeadWatch(hub, clock, linger_s=0.05)  # type: ignore[arg-type]
    watch.asked("finney")
    await _settle()
    assert hub.subscribed == [] and watch.watching() == frozenset()
    watch.asked("finney")
    watch.asked("finney")  # one watch per network, however many ask
    await _settle()
    assert hub.subscribed == [("finney", "chain_subscribeNewHeads")]
    assert watch.watching() == {"finney"}
    clock.t += 1  # nobody asked since: the next check leaves it
    await asyncio.sleep(0.12)
    assert hub.unsubscribed == ["s1"] and watch.watching() == frozenset()


async def test_answers_keep_the_watch() -> None:
    hub, clock = FakeHub(), Clock()
    watch = HeadWatch(hub, clock, linger_s=0.05)  # type: ignore[arg-type]
    watch.asked("finney")
    watch.asked("finney")
    await _settle()
    for _ in range(3):  # answered from it within each linger period
        await asyncio.sleep(0.04)
        clock.t += 0.04
        watch.answered("finney")
    assert hub.unsubscribed == [] and watch.watching() == {"finney"}
    watch.close()
    assert hub.unsubscribed == ["s1"]


async def test_no_node_wss_or_no_node_means_no_watch() -> None:
    for hub in (FakeHub(served=False), FakeHub(fail=True)):
        watch = HeadWatch(hub, Clock(), linger_s=30)  # type: ignore[arg-type]
        watch.asked("finney")
        watch.asked("finney")
        await _settle()
        assert hub.subscribed == [] and watch.watching() == frozenset()


async def test_live_is_the_hubs_word() -> None:
    hub = FakeHub(live_networks={"finney"})
    watch = HeadWatch(hub, Clock())  # type: ignore[arg-type]
    assert watch.live("finney") and not watch.live("test")


async def test_a_watch_closed_while_subscribing_leaves_its_subscription() -> None:
    hub, clock = FakeHub(), Clock()
    watch = HeadWatch(hub, clock, linger_s=30)  # type: ignore[arg-type]
    watch.asked("finney")
    watch.asked("finney")
    watch.close()  # before the hub answered
    await _settle()
    assert hub.subscribed == [("finney", "chain_subscribeNewHeads")]
    assert hub.unsubscribed == ["s1"] and watch.watching() == frozenset()
