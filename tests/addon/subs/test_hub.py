"""The subscription hub against real WebSockets: node stand-ins (``WsNode``, aiohttp
servers on 127.0.0.1) that answer ``chain_subscribeNewHeads`` and push heads. A
subscription is answered once a node took it, clients asking for the same one
share one upstream subscription, the last one leaving ends it upstream only after
the linger, a dying node's subscriptions move to another node with the clients'
ids kept and no head twice, a closed client socket's subscriptions go, and no
node within ``establish_s`` is ``NoUpstream``. Every wait is bounded."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest

from addon.rpc.sub_methods import SUBSCRIBE
from addon.subs.hub import HubSettings, NoUpstream, OwnSubscriber, SubscriptionHub
from addon.upstream.pool import TIER_SYNCED, TIER_UNHEALTHY, Upstream, UpstreamPool
from tests.addon.helpers import NodeChain, WsNode
from tests.fakes import FakeClock

NEW_HEADS = SUBSCRIBE["chain_subscribeNewHeads"]
BOUND_S = 10.0  # no test waits longer than this for anything


class Chain:
    """The ``ChainView`` the hub reads: the HTTP session, probe heights, and what
    it was told (heads delivered, moves)."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        self.session = session
        self.heads: list[int] = []
        self.moved: list[str] = []

    def heights(self, network: str) -> tuple[int | None, int | None]:
        return None, None

    def head_delivered(self, network: str, header: Any) -> None:
        self.heads.append(int(header["number"], 16))

    def subscription_moved(self, network: str) -> None:
        self.moved.append(network)

    def upstream_silent(self, endpoint: str) -> None:
        pass


class Client:
    """One client socket: what the hub sent it, its subscriptions (id -> method)."""

    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []
        self.subscriptions: dict[str, str] = {}

    def send(self, frame: bytes) -> None:
        self.frames.append(json.loads(frame))

    def heads(self, sub_id: str | None = None) -> list[int]:
        return [
            int(f["params"]["result"]["number"], 16)
            for f in self.frames
            if sub_id is None or f["params"]["subscription"] == sub_id
        ]


def pool_of(*nodes: WsNode) -> UpstreamPool:
    ups = []
    for node in nodes:
        u = Upstream(id=f"endpoint-{node.name}", url=node.url, provider=node.name, archive=False)
        u.tier = TIER_SYNCED
        ups.append(u)
    return UpstreamPool(ups, eject_after=3, eject_cooldown_s=30.0, clock=FakeClock())


@asynccontextmanager
async def hub_over(
    *nodes: WsNode, **settings: float
) -> AsyncIterator[tuple[SubscriptionHub, Chain]]:
    """A hub whose finney subscriptions go to ``nodes`` (started here, stopped after)."""
    for node in nodes:
        await node.start()
    async with aiohttp.ClientSession() as session:
        chain = Chain(session)
        hub = SubscriptionHub(
            {"finney": pool_of(*nodes)},
            chain,
            clock=FakeClock(),  # never moves: no subscription is ever stale
            settings=HubSettings(**{"call_timeout_s": 2.0, "establish_s": 5.0, **settings}),
        )
        try:
            yield hub, chain
        finally:
            await hub.close()
            for node in nodes:
                await node.stop()


async def subscribe(hub: SubscriptionHub, client: Client) -> str:
    """What the subscribe step does: subscribe, answer (here: nothing), greet."""
    shared, sub = await hub.subscribe("finney", NEW_HEADS, [], client.send, client)
    client.subscriptions[sub.sub_id] = "chain_subscribeNewHeads"
    shared.greet(sub)
    return sub.sub_id


async def until(check: Callable[[], bool]) -> None:
    """Wait (bounded by the test's timeout) until ``check()``."""
    while not check():  # noqa: ASYNC110 (a poll, bounded by the test's timeout)
        await asyncio.sleep(0.01)


async def test_a_subscription_is_answered_once_a_node_took_it_and_streams_its_heads() -> None:
    node = WsNode("a", NodeChain(height=10))
    async with asyncio.timeout(BOUND_S), hub_over(node) as (hub, chain):
        client = Client()
        sub_id = await subscribe(hub, client)
        assert node.subscribes() == 1
        await until(lambda: client.heads() == [10])  # the current head, as from a node
        await node.push()
        await node.push()
        await until(lambda: client.heads() == [10, 11, 12])
        assert client.frames[-1] == {
            "jsonrpc": "2.0",
            "method": "chain_newHead",
            "params": {"subscription": sub_id, "result": node.chain.header(12)},
        }
        assert sub_id not in node.subs  # the client's id is the proxy's, not the node's
        assert chain.heads == [10, 11, 12]  # head pinning learns each head


async def test_two_clients_asking_the_same_share_one_upstream_subscription() -> None:
    node = WsNode("a", NodeChain(height=10))
    async with asyncio.timeout(BOUND_S), hub_over(node) as (hub, _):
        first, second = Client(), Client()
        id1 = await subscribe(hub, first)
        id2 = await subscribe(hub, second)
        assert id1 != id2 and node.subscribes() == 1 and len(hub.shared) == 1
        await node.push()
        await until(lambda: first.heads() == [10, 11] and second.heads() == [10, 11])
        assert {f["params"]["subscription"] for f in second.frames} == {id2}
        assert hub.gauges() == {
            "client_subscriptions": {"chain_subscribeNewHeads": 2},
            "upstream_subscriptions": {"chain_subscribeNewHeads": 1},
            "upstream_silent": {},
        }


async def test_the_last_unsubscribe_ends_the_upstream_subscription_after_the_linger() -> None:
    node = WsNode("a", NodeChain(height=10))
    async with asyncio.timeout(BOUND_S), hub_over(node, linger_s=0.3) as (hub, _):
        first, second = Client(), Client()
        id1 = await subscribe(hub, first)
        id2 = await subscribe(hub, second)
        assert not hub.unsubscribe(id1, second)  # not its subscription
        assert hub.unsubscribe(id1, first) and not hub.unsubscribe(id1, first)
        assert hub.unsubscribe(id2, second)
        # a client back within the linger finds it live: no new upstream subscription
        third = Client()
        id3 = await subscribe(hub, third)
        assert node.subscribes() == 1 and node.unsubscribes() == 0
        await until(lambda: third.heads() == [10])  # the current head at once
        assert hub.unsubscribe(id3, third)
        await asyncio.sleep(0.1)
        assert node.unsubscribes() == 0 and len(hub.shared) == 1  # lingering
        await until(lambda: node.unsubscribes() == 1)
        assert hub.shared == {} and hub.by_id == {}
        await until(lambda: hub.sockets == {})  # no subscription left on the socket: closed
        await node.push()
        await asyncio.sleep(0.05)
        assert third.heads() == [10]


async def test_a_dying_node_moves_its_subscriptions_with_the_same_ids_and_no_duplicate() -> None:
    chain_ = NodeChain(height=10)
    a, b = WsNode("a", chain_), WsNode("b", chain_)
    async with asyncio.timeout(BOUND_S), hub_over(a, b) as (hub, chain):
        client = Client()
        sub_id = await subscribe(hub, client)
        (shared,) = hub.shared.values()
        first, other = (a, b) if shared.upstream.id == "endpoint-a" else (b, a)
        await first.push()
        await until(lambda: client.heads() == [10, 11])
        chain_.height = 13  # blocks go by while the node dies
        await first.kill()
        await until(lambda: other.subscribes() == 1 and shared.live.is_set())
        assert shared.upstream.id == f"endpoint-{other.name}" and chain.moved == ["finney"]
        await other.push()
        # 13 came from the new node at once, 12 was fetched to fill the gap, and
        # 11 (delivered already) was never sent twice
        await until(lambda: client.heads() == [10, 11, 12, 13, 14])
        assert {f["params"]["subscription"] for f in client.frames} == {sub_id}
        assert ("chain_getBlockHash", [12]) in other.calls
        await asyncio.sleep(0.05)
        assert client.heads() == [10, 11, 12, 13, 14]


async def test_release_ends_every_subscription_of_a_closed_socket() -> None:
    node = WsNode("a", NodeChain(height=10))
    async with asyncio.timeout(BOUND_S), hub_over(node, linger_s=0.1) as (hub, _):
        leaving, staying = Client(), Client()
        gone = [await subscribe(hub, leaving), await subscribe(hub, leaving)]
        kept = await subscribe(hub, staying)
        hub.release(leaving)
        assert leaving.subscriptions == {} and set(hub.by_id) == {kept}
        assert not any(hub.unsubscribe(sub_id, leaving) for sub_id in gone)
        await node.push()
        await until(lambda: staying.heads() == [10, 11])
        assert leaving.heads() == [10, 10]  # nothing after its release
        await asyncio.sleep(0.2)  # past the linger: still live for the one left
        assert node.unsubscribes() == 0 and len(hub.shared) == 1


@pytest.mark.parametrize("node_state", ["silent", "down"])
async def test_no_node_taking_it_within_establish_s_is_no_upstream(node_state: str) -> None:
    node = WsNode("a", NodeChain(), silent=node_state == "silent")
    async with asyncio.timeout(BOUND_S), hub_over(node, establish_s=0.3) as (hub, _):
        if node_state == "down":
            await node.stop()  # nothing listens on its port
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(NoUpstream, match=r"within 0\.3s"):
            await subscribe(hub, Client())
        assert 0.25 <= loop.time() - start < 2.0
        assert hub.shared == {} and hub.by_id == {}  # nobody waits for it any more
        assert hub.opening == {} and hub.client_opening == {}  # nor counts as waiting


async def test_a_subscribe_cancelled_while_it_waits_leaves_nothing_behind() -> None:
    """Its socket closed while no node had taken the subscription yet: the
    upstream subscription nobody holds ends after the linger (it stayed for
    ever, one per fresh key a client sent and closed)."""
    node = WsNode("a", NodeChain(), silent=True)
    async with asyncio.timeout(BOUND_S), hub_over(node, linger_s=0.05) as (hub, _):
        client = Client()
        task = asyncio.create_task(subscribe(hub, client))
        await until(lambda: hub.opening == {id(client): 1})
        assert hub.client_opening == {"": 1}  # (a client with no name)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert hub.opening == {} and hub.client_opening == {}
        await until(lambda: hub.shared == {})


async def test_heads_are_live_while_a_subscription_holds_and_has_delivered() -> None:
    node = WsNode("a", NodeChain(height=10))
    async with asyncio.timeout(BOUND_S), hub_over(node) as (hub, _):
        assert not hub.heads_live("finney")
        await subscribe(hub, Client())
        await until(lambda: hub.heads_live("finney"))  # the current head came
        assert not hub.heads_live("test")
        await node.kill()  # no other node to move to: no longer live
        await until(lambda: not hub.heads_live("finney"))


async def test_the_proxys_own_subscribers_are_not_counted_as_clients() -> None:
    node = WsNode("a", NodeChain(height=10))
    async with asyncio.timeout(BOUND_S), hub_over(node) as (hub, _):
        await subscribe(hub, Client())
        # as the head watch and the follow views subscribe (an owner that is
        # no dict key: it once broke every chainHead_v1_follow)
        own = OwnSubscriber("chainproxy:head-watch:finney")
        heard: list[bytes] = []
        await hub.subscribe("finney", NEW_HEADS, [], heard.append, own)
        assert hub.opening == {} and hub.client_opening == {}
        assert hub.gauges()["client_subscriptions"] == {"chain_subscribeNewHeads": 1}
        assert hub.gauges()["upstream_subscriptions"] == {"chain_subscribeNewHeads": 1}


async def test_a_subscription_of_any_kind_leaves_a_node_unhealthy_or_on_another_chain() -> None:
    """Storage and runtime-version subscriptions too: a node that hangs (no
    reset) pushed them no more, and they stayed on it until the socket's
    heartbeat (values lost meanwhile); one on another chain pushes its data."""
    a, b = WsNode("a", NodeChain()), WsNode("b", NodeChain())
    async with asyncio.timeout(BOUND_S), hub_over(a, b) as (hub, _):
        pool = hub.pools["finney"]
        node = pool.upstreams["endpoint-a"]
        for kind in ("state_subscribeStorage", "state_subscribeRuntimeVersion"):
            sh: Any = SimpleNamespace(
                network="finney", upstream=node, last_at=None, kind=SUBSCRIBE[kind]
            )
            node.tier, node.foreign = TIER_SYNCED, False
            assert hub.stale(sh) == ""
            node.tier = TIER_UNHEALTHY  # while the other node is healthy
            assert hub.stale(sh) == "node unhealthy", kind
            node.tier, node.foreign = TIER_SYNCED, True
            assert hub.stale(sh) == "wrong chain", kind
            # no node the move would take: it stays (no moves back and forth)
            other = pool.upstreams["endpoint-b"]
            other.foreign = True
            assert hub.stale(sh) == "", kind
            other.foreign, other.tier, node.foreign = False, TIER_UNHEALTHY, False
            node.tier = TIER_UNHEALTHY
            assert hub.stale(sh) == "", kind
            other.tier = TIER_SYNCED


async def test_a_waiter_that_gives_up_never_drops_the_subscription_under_another() -> None:
    """Two subscribes wait on one upstream subscription no node has taken yet:
    the first to give up (its establish_s) leaves it to the second, which
    drops it when it gives up in turn (the first dropped it under the second)."""
    node = WsNode("a", NodeChain(), silent=True)
    async with asyncio.timeout(BOUND_S), hub_over(node, establish_s=0.4) as (hub, _):
        first = asyncio.create_task(subscribe(hub, Client()))
        await until(lambda: len(hub.shared) == 1)
        (sh,) = hub.shared.values()
        await asyncio.sleep(0.2)
        second = asyncio.create_task(subscribe(hub, Client()))
        await until(lambda: sh.waiting == 2)
        with pytest.raises(NoUpstream):
            await first
        assert list(hub.shared.values()) == [sh] and sh.waiting == 1  # still the second's
        with pytest.raises(NoUpstream):
            await second
        assert hub.shared == {} and sh.waiting == 0
