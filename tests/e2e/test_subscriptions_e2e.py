"""WebSocket read subscriptions through the real mitmdump + addon to simulated
nodes that serve them (node-wss endpoints): shared upstream subscriptions,
no gap and no duplicate when the node holding one dies, unsubscribe, the
other kinds, release when clients leave, and the policies (quota, per-socket
bound, HTTP refusal). Everything on 127.0.0.1, every wait bounded."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any
from unittest.mock import ANY

import aiohttp
import pytest

from tests.e2e.harness import Stack, base_config
from tests.e2e.helpers import (
    PROXY_DEFAULTS,
    Client,
    call,
    metric_value,
    metrics_text,
    next_client_ip,
    post,
    usage_delivered,
    wait_until,
    with_wss,
)

pytestmark = pytest.mark.e2e

BLOCK_S = 1.0


def build(tmp: Any, names: tuple[str, ...], **proxy: Any) -> Stack:
    stack = Stack(tmp)
    epoch = time.time() - 600
    try:
        stack.start_nodes(names, epoch=epoch, block_time=BLOCK_S)
        websocket = {"stall_s": 3, "upstream_linger_s": 1, "max_subscriptions": 4}
        config = base_config(
            tmp,
            stack.nodes,
            top={"probe": {"interval_s": 2, "head_interval_s": 1, "timeout_s": 2}},
            **{**PROXY_DEFAULTS, "websocket": websocket, **proxy},
        )
        stack.write_config(with_wss(config))
        stack.start_sidecar()
        stack.start_proxy()
    except BaseException:
        stack.stop()
        raise
    return stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = build(tmp_path_factory.mktemp("subs"), ("alpha", "beta", "gamma"))
    yield s
    s.stop()


def ws_url(stack: Stack) -> str:
    return stack.rpc_url().replace("http://", "ws://")


@asynccontextmanager
async def client(stack: Stack, ip: str | None = None) -> AsyncIterator[Client]:
    connector = aiohttp.TCPConnector(local_addr=(ip or next_client_ip(), 0))
    async with aiohttp.ClientSession(connector=connector) as s:
        async with s.ws_connect(ws_url(stack), timeout=aiohttp.ClientWSTimeout(10)) as ws:
            c = Client(ws)
            yield c
            c._reader.cancel()


def numbers(headers: list[Any]) -> list[int]:
    return [int(h["number"], 16) for h in headers]


def node_subscriptions(stack: Stack) -> dict[str, int]:
    return {n.name: n.state()["subscriptions"] for n in stack.nodes if n.proc.alive()}


async def upstream_subscriptions(stack: Stack, total: int, what: str) -> dict[str, int]:
    """Until the nodes hold ``total`` subscriptions in all (those of earlier tests
    linger ``upstream_linger_s`` after their clients left); per node."""

    def held() -> dict[str, int] | None:
        now = node_subscriptions(stack)
        return now if sum(now.values()) == total else None

    return await wait_until(held, 15, what)  # type: ignore[no-any-return]


async def test_http_subscription_is_refused_with_the_websocket_url(stack: Stack) -> None:
    r = await post(stack.rpc_url(), call("chain_subscribeNewHeads"))
    assert r.status == 403
    assert "WebSocket" in r.body["error"]["data"]["reason"]


async def test_new_heads_arrive_in_order_with_the_current_head_first(stack: Stack) -> None:
    async with client(stack) as c:
        sid = (await c.ask("chain_subscribeNewHeads"))["result"]
        assert isinstance(sid, str)
        heads = await c.wait_notes(sid, 3, timeout=10)
        ns = numbers(heads)
        assert ns == list(range(ns[0], ns[0] + len(ns)))
        assert c.methods[sid] == "chain_newHead"


async def test_other_kinds_deliver(stack: Stack) -> None:
    async with client(stack) as c:
        fin = (await c.ask("chain_subscribeFinalisedHeads"))["result"]
        rv = (await c.ask("state_subscribeRuntimeVersion"))["result"]
        key = "0x26aa394eea5630e07c48ae0c9558cef702a5c1b19ab7a04f536c519aca4983ac"  # System.Number
        st = (await c.ask("state_subscribeStorage", [[key]]))["result"]
        finalized = await c.wait_notes(fin, 2, timeout=10)
        ns = numbers(finalized)
        assert ns[1] == ns[0] + 1 and c.methods[fin] == "chain_finalizedHead"
        version = (await c.wait_notes(rv, 1))[0]
        assert version["specVersion"] > 0 and c.methods[rv] == "state_runtimeVersion"
        change = (await c.wait_notes(st, 1))[0]
        assert change["changes"][0][0] == key and c.methods[st] == "state_storage"


async def test_unsubscribe_stops_notifications_and_only_owned_ids_count(stack: Stack) -> None:
    async with client(stack) as c, client(stack) as other:
        sid = (await c.ask("chain_subscribeNewHeads"))["result"]
        await c.wait_notes(sid, 1)
        assert (await other.ask("chain_unsubscribeNewHeads", [sid]))["result"] is False
        assert (await c.ask("chain_unsubscribeNewHeads", [sid]))["result"] is True
        seen = len(c.notes[sid])
        # new heads do come meanwhile: another client's subscription hears two
        watch = (await other.ask("chain_subscribeNewHeads"))["result"]
        await other.wait_notes(watch, 3, timeout=10)  # the current head, then two new ones
        assert len(c.notes[sid]) == seen
        assert (await c.ask("chain_unsubscribeNewHeads", [sid]))["result"] is False


async def test_per_socket_bound_and_write_subscriptions(stack: Stack) -> None:
    async with client(stack) as c:
        for _ in range(4):
            assert "result" in await c.ask("chain_subscribeNewHeads")
        refused = await c.ask("chain_subscribeNewHeads")
        assert refused["error"]["data"]["policy"] == "max_subscriptions"
        write = await c.ask("author_submitAndWatchExtrinsic", ["0x00"])
        assert write["error"]["code"] == -32601


async def test_the_bound_holds_for_subscribes_sent_at_once(stack: Stack) -> None:
    """Eight subscribes to new keys sent without waiting: each waits for a node
    to take its upstream subscription, and the bound counts those waiting."""
    async with client(stack) as c:
        keys = [[f"0x{i:02x}c0ffee"] for i in range(8)]
        answers = await asyncio.gather(*(c.ask("state_subscribeStorage", k) for k in keys))
        taken = [a["result"] for a in answers if "result" in a]
        refused = [a["error"]["data"] for a in answers if "error" in a]
        assert len(taken) == 4 and len(set(taken)) == 4, answers
        assert refused == [{"policy": "max_subscriptions", "reason": ANY, "limit": 4}] * 4
        for sid in taken:
            assert (await c.ask("state_unsubscribeStorage", [sid]))["result"] is True


async def test_a_handshake_over_quota_is_429_not_upgraded(stack: Stack) -> None:
    ip = next_client_ip()
    for _ in range(100):
        await post(stack.rpc_url(), call("system_health"), client_ip=ip)
    connector = aiohttp.TCPConnector(local_addr=(ip, 0))
    async with aiohttp.ClientSession(connector=connector) as s:
        with pytest.raises(aiohttp.WSServerHandshakeError) as e:
            await s.ws_connect(ws_url(stack))
    assert e.value.status == 429
    assert int(e.value.headers["Retry-After"]) >= 1
    assert e.value.headers["X-RateLimit-Limit"] == "100"
    assert len(e.value.headers["X-Request-Id"]) == 16  # a complaint can quote it


async def test_a_stalled_node_is_left_and_the_gap_is_filled(stack: Stack) -> None:
    """The node feeding the heads freezes (its socket stays open): after
    ``stall_s`` without a head while the probes see the chain advance, the
    subscription moves and the heads missed meanwhile are delivered in order."""
    async with client(stack) as c:
        sid = (await c.ask("chain_subscribeNewHeads"))["result"]
        await c.wait_notes(sid, 2)
        held = await upstream_subscriptions(stack, 1, "only this test's subscription is held")
        holder = next(n for n in stack.nodes if held.get(n.name) == 1)
        holder.control(freeze=True)
        try:
            seen = len(c.notes[sid])
            await c.wait_notes(sid, seen + 8, timeout=30)
        finally:
            holder.control(freeze=False)
        ns = numbers(c.notes[sid])
        assert ns == list(range(ns[0], ns[0] + len(ns))), ns
        # left: its canary subscription (silent sockets: test_silent_nodes_e2e.py)
        # heard it push again once it thawed, and was ended
        await wait_until(
            lambda: node_subscriptions(stack).get(holder.name) == 0, 10, "the node was left"
        )


async def test_five_clients_share_one_upstream_subscription_that_survives_its_node(
    stack: Stack,
) -> None:
    async with AsyncExitStack() as es:
        clients = [await es.enter_async_context(client(stack)) for _ in range(5)]
        sids = [(await c.ask("chain_subscribeNewHeads"))["result"] for c in clients]
        assert len(set(sids)) == 5
        for c, sid in zip(clients, sids, strict=True):
            await c.wait_notes(sid, 2)
        # one upstream subscription for five clients (once earlier tests' have gone)
        held = await upstream_subscriptions(stack, 1, "one upstream subscription for five")
        holder = next(n for n in stack.nodes if n.name in held and held[n.name] == 1)
        before = [len(c.notes[sid]) for c, sid in zip(clients, sids, strict=True)]
        try:
            holder.proc.signal_group(signal.SIGKILL)  # a crash: no close frame
            holder.proc.popen.wait(10)
            for c, sid, n in zip(clients, sids, before, strict=True):
                await c.wait_notes(sid, n + 6, timeout=30)
            for c, sid in zip(clients, sids, strict=True):
                ns = numbers(c.notes[sid])
                assert ns == list(range(ns[0], ns[0] + len(ns))), ns  # each number once, in order
            after = node_subscriptions(stack)
            assert sum(after.values()) == 1, after
        finally:
            stack.restart_node(holder)  # the next tests have their three nodes
    # the sockets closed: released after the linger
    await upstream_subscriptions(stack, 0, "the upstream subscription is released")


async def test_sidecar_metrics_show_subscriptions_moves_and_opens(stack: Stack) -> None:
    """The proxy's live counters and gauges reach the sidecar's /metrics: this
    test's socket and subscription (once earlier tests' are gone) and a move it
    causes itself (its node frozen)."""
    async with client(stack) as c:
        sid = (await c.ask("chain_subscribeNewHeads"))["result"]
        await c.wait_notes(sid, 1)
        held = await upstream_subscriptions(stack, 1, "only this test's subscription is held")
        await usage_delivered(stack)  # the moves of the tests before have all been counted
        moves = metric_value(metrics_text(stack.sidecar_url), MOVES)
        holder = next(n for n in stack.nodes if held.get(n.name) == 1)
        holder.control(freeze=True)
        try:
            seen = len(c.notes[sid])
            await c.wait_notes(sid, seen + 3, timeout=30)  # moved to another node
        finally:
            holder.control(freeze=False)

        def shown() -> str | None:
            text = metrics_text(stack.sidecar_url)
            wanted = (
                metric_value(text, "chainproxy_client_subscriptions", method=NEW_HEADS) == 1,
                metric_value(text, "chainproxy_upstream_subscriptions", method=NEW_HEADS) == 1,
                metric_value(text, MOVES) > moves,
                metric_value(text, "chainproxy_websocket_connections") == 1,
            )
            return text if all(wanted) else None

        text = await wait_until(shown, 20, "the sidecar shows this test's socket and move")
    assert 'method="chain_subscribeNewHeads",network="finney",outcome="ok"' in text


NEW_HEADS = "chain_subscribeNewHeads"
MOVES = "chainproxy_subscription_moves_total"
