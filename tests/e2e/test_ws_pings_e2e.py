"""Client WebSocket pings through the real proxy: every client socket is
pinged each ``ping_interval_s``; a client that answers stays, one that stops
answering (its automatic pongs off) is closed with 1011 within
``ping_timeout_s`` of an unanswered ping, and its socket slot and its
subscription are freed. Both ways a socket is read: chainproxy's direct
reads (the pong read by chainproxy) and mitmproxy's layer (the pong relayed
to the sink)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.e2e.harness import Stack, base_config
from tests.e2e.helpers import PROXY_DEFAULTS, call, next_client_ip, wait_until, with_wss

pytestmark = pytest.mark.e2e

PING_S, TIMEOUT_S = 0.5, 1.0
READ_WAYS = {"direct": (), "mitmproxy": ("chainproxy_ws_direct=false",)}


@pytest.fixture(params=list(READ_WAYS))
def pinged(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Stack]:
    stack = Stack(tmp_path, proxy_sets=READ_WAYS[request.param])
    try:
        stack.start_node("alpha", epoch=time.time() - 600, block_time=1.0)
        websocket = {
            "ping_interval_s": PING_S,
            "ping_timeout_s": TIMEOUT_S,
            "max_connections_per_client": 1,
            "upstream_linger_s": 0.5,
        }
        config = base_config(
            tmp_path,
            stack.nodes,
            top={"probe": {"interval_s": 2, "head_interval_s": 1, "timeout_s": 2}},
            **{**PROXY_DEFAULTS, "websocket": websocket},
        )
        stack.write_config(with_wss(config))
        stack.start_sidecar()
        stack.start_proxy()
        yield stack
    finally:
        stack.stop()


def ws_url(stack: Stack) -> str:
    return stack.rpc_url().replace("http://", "ws://")


async def test_a_client_that_stops_answering_pings_is_closed_and_freed(pinged: Stack) -> None:
    ip, other = next_client_ip(), next_client_ip()
    alpha = pinged.nodes[0]
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(ip, 0))) as s,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(other, 0))) as s2,
    ):
        # a client that answers: it stays open across pings
        good = await s2.ws_connect(ws_url(pinged), autoping=False)
        answered = 0

        async def answer() -> None:
            nonlocal answered
            async for msg in good:
                if msg.type is aiohttp.WSMsgType.PING:
                    await good.pong(msg.data)
                    answered += 1

        answering = asyncio.create_task(answer())
        # a client that reads but never answers a ping (its automatic pongs off)
        mute = await s.ws_connect(ws_url(pinged), autoping=False)
        await mute.send_json(call("chain_subscribeNewHeads"))
        await wait_until(lambda: alpha.state()["subscriptions"] == 1, 10, "subscribed upstream")
        # its one socket slot is held: a second socket of the same client is refused
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await s.ws_connect(ws_url(pinged))
        assert refused.value.status == 429

        pings = 0
        async with asyncio.timeout(10):
            async for msg in mute:  # heads and pings, never a pong, until the close
                pings += msg.type is aiohttp.WSMsgType.PING
        assert mute.close_code == 1011 and pings >= 1, (mute.close_code, pings)

        # freed: the client may open a socket again, its subscription is released
        async def reopened() -> bool:
            try:
                again = await s.ws_connect(ws_url(pinged))
            except aiohttp.WSServerHandshakeError:
                return False
            await again.close()
            return True

        await wait_until(reopened, 10, "the client's socket slot was freed", step=0.2)
        await wait_until(
            lambda: alpha.state()["subscriptions"] == 0, 10, "the subscription was released"
        )
        # the answering client was pinged all along, and is still open
        await wait_until(lambda: answered >= 3, 10, "three pings answered")
        assert not good.closed
        answering.cancel()
        await good.close()


@pytest.fixture(params=list(READ_WAYS))
def unpinged(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Stack]:
    """Pings off, and mitmproxy's inactivity timeout (``tcp_timeout``) short."""
    sets = (*READ_WAYS[request.param], f"tcp_timeout={TCP_TIMEOUT_S}")
    stack = Stack(tmp_path, proxy_sets=sets)
    try:
        stack.start_node("alpha", epoch=time.time() - 600, block_time=1.0)
        config = base_config(
            tmp_path,
            stack.nodes,
            **{**PROXY_DEFAULTS, "websocket": {"ping_interval_s": 0}},
        )
        stack.write_config(with_wss(config))
        stack.start_sidecar()
        stack.start_proxy()
        yield stack
    finally:
        stack.stop()


TCP_TIMEOUT_S = 2


async def test_a_client_that_only_listens_outlives_the_inactivity_timeout(
    unpinged: Stack,
) -> None:
    """Notifications written to a socket are activity, whoever writes them:
    a subscriber that sends nothing after its subscribe is never cut for
    being quiet (direct writes once let mitmproxy's ``tcp_timeout`` close it
    with no close frame)."""
    async with (
        aiohttp.ClientSession() as s,
        s.ws_connect(ws_url(unpinged), headers={"X-Forwarded-For": next_client_ip()}) as ws,
    ):
        await ws.send_json(call("chain_subscribeNewHeads", id_=1))
        heads = 0
        deadline = time.monotonic() + 3 * TCP_TIMEOUT_S + 1
        while time.monotonic() < deadline:
            try:
                msg = await ws.receive(timeout=deadline - time.monotonic())
            except TimeoutError:
                break
            assert msg.type is aiohttp.WSMsgType.TEXT, (msg.type, msg.data)
            heads += "params" in msg.json()
        assert not ws.closed
        assert heads >= 2 * TCP_TIMEOUT_S  # a block a second, all the while
