"""Silent upstream sockets: the evidence that a network advanced and the
judgement (pure), then the hub against real WebSockets (``WsNode`` stand-ins):
a node that keeps its socket open and answers calls but pushes no head while
the network advances loses every subscription on that socket (the finalized
heads' too) to another node, gap-free; it is marked silent and avoided for
new subscriptions until its canary hears it push again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp

from addon.rpc.sub_methods import SUBSCRIBE
from addon.subs.hub import HubSettings, SubscriptionHub
from addon.subs.silence import evidence, judge
from addon.upstream.pool import TIER_LAGGING, TIER_SYNCED
from tests.addon.helpers import NodeChain, WsNode
from tests.addon.subs.test_hub import BOUND_S, Chain, Client, pool_of, until
from tests.fakes import FakeClock

NEW_HEADS = SUBSCRIBE["chain_subscribeNewHeads"]
FINALIZED = SUBSCRIBE["chain_subscribeFinalizedHeads"]
STALL_S = 24.0


# --- the rule ------------------------------------------------------------------------------


def test_the_evidence_is_the_probes_and_every_head_delivered() -> None:
    assert evidence(None, None, []) == (None, None)
    assert evidence(100, 95, []) == (100, 95)
    # a finalized head another socket delivered: the best is at least there too
    assert evidence(None, None, [("finalized_heads", 120)]) == (120, 120)
    assert evidence(100, 95, [("new_heads", 101), ("storage", 500)]) == (101, 95)
    assert evidence(100, 95, [("new_heads", None), ("all_heads", 103)]) == (103, 95)


def test_silent_only_when_quiet_for_stall_s_while_the_network_is_ahead() -> None:
    assert judge("new_heads", 100, STALL_S, STALL_S, 102, None).startswith("silent")
    assert judge("all_heads", 100, STALL_S, STALL_S, 102, None).startswith("silent")
    assert judge("new_heads", 100, STALL_S - 1, STALL_S, 102, None) == ""  # not quiet long
    assert judge("new_heads", 100, STALL_S, STALL_S, 100, None) == ""  # the chain stood still
    assert judge("new_heads", 100, STALL_S, STALL_S, None, None) == ""  # nothing known
    assert judge("new_heads", None, STALL_S, STALL_S, 102, None) == ""  # nothing delivered yet
    # finalized heads are judged against the finalized height, not the best
    assert judge("finalized_heads", 98, STALL_S, STALL_S, 102, 98) == ""
    assert judge("finalized_heads", 98, STALL_S, STALL_S, 102, 99).startswith("silent")
    assert judge("storage", 1, 1000, STALL_S, 102, 99) == ""  # values change when they do


# --- the hub -------------------------------------------------------------------------------


class Probed(Chain):
    """The chain view with the probes' heights the test sets, and the silent nodes told."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        super().__init__(session)
        self.tip: int | None = None
        self.silent: list[str] = []

    def heights(self, network: str) -> tuple[int | None, int | None]:
        return self.tip, None

    def upstream_silent(self, endpoint: str) -> None:
        self.silent.append(endpoint)


@asynccontextmanager
async def hub_over(*nodes: WsNode) -> AsyncIterator[tuple[SubscriptionHub, Probed, FakeClock]]:
    for node in nodes:
        await node.start()
    clock = FakeClock()
    async with aiohttp.ClientSession() as session:
        chain = Probed(session)
        hub = SubscriptionHub(
            {"finney": pool_of(*nodes)},
            chain,
            clock=clock,
            settings=HubSettings(call_timeout_s=2.0, establish_s=5.0, stall_s=STALL_S),
        )
        try:
            yield hub, chain, clock
        finally:
            await hub.close()
            for node in nodes:
                await node.stop()


async def subscribe(hub: SubscriptionHub, client: Client, kind: object, params: list[str]) -> str:
    shared, sub = await hub.subscribe("finney", kind, params, client.send, client)  # type: ignore[arg-type]
    shared.greet(sub)
    return sub.sub_id


def ends(node: WsNode) -> int:
    return sum(m.startswith("chain_unsubscribe") for m, _ in node.calls)


async def test_a_silent_socket_loses_every_subscription_and_its_node_is_marked() -> None:
    chain_ = NodeChain(height=10)
    a, b = WsNode("a", chain_), WsNode("b", chain_)
    async with asyncio.timeout(BOUND_S), hub_over(a, b) as (hub, chain, clock):
        pool = hub.pools["finney"]
        pool.upstreams["endpoint-b"].tier = TIER_LAGGING  # both subscriptions go to a
        client = Client()
        heads = await subscribe(hub, client, NEW_HEADS, [])
        finalized = await subscribe(hub, client, FINALIZED, [])
        assert {sh.upstream.id for sh in hub.shared.values()} == {"endpoint-a"}  # type: ignore[union-attr]
        await until(lambda: client.heads(heads) == [10] and client.heads(finalized) == [10])
        pool.upstreams["endpoint-b"].tier = TIER_SYNCED
        a.muted = True  # open, answering calls, pushing nothing
        await a.push()
        await a.push()
        chain.tip = 12  # the probes see the network two blocks on
        clock.advance(STALL_S - 1)
        hub.check()
        assert all(sh.upstream.id == "endpoint-a" for sh in hub.shared.values())  # type: ignore[union-attr]
        clock.advance(1)
        hub.check()  # two block times without a head while the network advanced
        await until(
            lambda: all(
                sh.live.is_set() and sh.upstream.id == "endpoint-b"  # type: ignore[union-attr]
                for sh in hub.shared.values()
            )
        )
        # the finalized heads moved with the socket: its own feed was not judged
        # (nothing said the finalized height had moved), the socket's was
        await until(lambda: client.heads(heads) == [10, 11, 12])
        await until(lambda: client.heads(finalized) == [10, 11, 12])
        assert chain.silent == ["endpoint-a"] and hub.silent.avoid() == {"endpoint-a"}
        assert hub.gauges()["upstream_silent"] == {"endpoint-a": 1}
        assert len(a.subs) == 1 and ends(a) == 1  # one left on it as the canary, one ended
        await b.push()
        await until(lambda: client.heads(heads) == [10, 11, 12, 13])

        # a new subscription avoids the silent node, though it looks the cheaper
        pool.upstreams["endpoint-b"].ewma_ms = 900.0
        pool.upstreams["endpoint-b"].updated_at = clock.t
        later = await subscribe(hub, client, NEW_HEADS, ["later"])
        assert hub.by_id[later].upstream.id == "endpoint-b"  # type: ignore[union-attr]

        # it pushes again: the canary hears it, the mark goes, the canary is ended
        a.muted = False
        await a.push()
        await until(lambda: not hub.silent.avoid() and len(a.subs) == 0 and ends(a) == 2)
        assert hub.gauges()["upstream_silent"] == {}
        await b.push()
        await until(lambda: client.heads(heads) == [10, 11, 12, 13, 14, 15])
        assert client.heads(heads) == [10, 11, 12, 13, 14, 15]  # nothing twice from the canary


async def test_a_silent_node_is_still_taken_when_no_other_is_left() -> None:
    chain_ = NodeChain(height=10)
    a, b = WsNode("a", chain_), WsNode("b", chain_)
    async with asyncio.timeout(BOUND_S), hub_over(a, b) as (hub, chain, clock):
        hub.pools["finney"].upstreams["endpoint-b"].tier = TIER_LAGGING
        client = Client()
        heads = await subscribe(hub, client, NEW_HEADS, [])
        await until(lambda: client.heads(heads) == [10])
        a.muted = True
        await a.push()
        chain.tip = 11
        clock.advance(STALL_S)
        hub.check()
        (shared,) = hub.shared.values()
        await until(lambda: shared.live.is_set() and shared.upstream.id == "endpoint-b")  # type: ignore[union-attr]
        await b.kill()  # the only other node dies: the silent one is better than none
        await until(lambda: shared.live.is_set() and shared.upstream.id == "endpoint-a")  # type: ignore[union-attr]
        assert "endpoint-a" in hub.silent.avoid()  # still silent: its canary heard nothing
