"""JSON-RPC over WebSocket on the simulated node (real sockets on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from simnode import FINNEY_GENESIS, SimNode
from tests.simnode.helpers import EPOCH, req


@pytest.fixture
async def node() -> AsyncIterator[SimNode]:
    n = SimNode(name="ws", clock=lambda: EPOCH, epoch=EPOCH, start_height=1000, rng_seed=1)
    await n.start()
    try:
        yield n
    finally:
        await n.stop()


async def recv_json(ws: aiohttp.ClientWebSocketResponse, timeout: float = 2.0) -> Any:
    msg = await ws.receive(timeout=timeout)
    assert msg.type is aiohttp.WSMsgType.TEXT, msg
    return json.loads(msg.data)


async def test_ws_single_batch_and_counters(node: SimNode, session: aiohttp.ClientSession) -> None:
    async with session.ws_connect(node.url + "/any/path") as ws:
        await ws.send_json(req("chain_getBlockHash", [0], rid="a"))
        assert await recv_json(ws) == {"jsonrpc": "2.0", "id": "a", "result": FINNEY_GENESIS}
        await ws.send_json([req("system_health", rid=1), req("chain_getHeader", rid=2)])
        out = await recv_json(ws)
        assert [o["id"] for o in out] == [1, 2]
        assert out[1]["result"]["number"] == hex(1000)
        await ws.send_str("{not json")
        assert (await recv_json(ws))["error"]["code"] == -32700
        # a method the node does not have: an ordinary "method not found" answer
        await ws.send_json(req("grandpa_subscribeJustifications", rid=9))
        assert (await recv_json(ws))["error"]["code"] == -32601
    state = node.state()
    assert state["requests"] == 4
    assert state["calls"]["chain_getHeader"] == 1


async def test_ws_subscriptions_as_a_node_serves_them(
    node: SimNode, session: aiohttp.ClientSession
) -> None:
    """New heads: the id, the current head at once, then each new height once,
    in order; finalized heads; unsubscribe; the live count in /_sim/state."""
    async with session.ws_connect(node.url) as ws:
        await ws.send_json(req("chain_subscribeNewHeads", rid=1))
        answer = await recv_json(ws)
        sid = answer["result"]
        assert answer["id"] == 1 and isinstance(sid, str)
        first = await recv_json(ws)
        assert first["method"] == "chain_newHead" and first["params"]["subscription"] == sid
        assert node.state()["subscriptions"] == 1
        await ws.send_json(req("chain_unsubscribeNewHeads", [sid], rid=2))
        assert (await recv_json(ws)) == {"jsonrpc": "2.0", "id": 2, "result": True}
        assert node.state()["subscriptions"] == 0
        await ws.send_json(req("chain_unsubscribeNewHeads", [sid], rid=3))
        assert (await recv_json(ws))["result"] is False
        await ws.send_json(req("state_subscribeStorage", [], rid=4))
        assert (await recv_json(ws))["error"]["code"] == -32602  # keys are required
    assert node.state()["subscriptions"] == 0


async def test_plain_get_is_still_405(node: SimNode, session: aiohttp.ClientSession) -> None:
    async with session.get(node.url + "/x") as r:
        assert r.status == 405


async def test_ws_handshake_faults(node: SimNode, session: aiohttp.ClientSession) -> None:
    node.set_faults(http_status=503)
    with pytest.raises(aiohttp.WSServerHandshakeError) as info:
        await session.ws_connect(node.url)
    assert info.value.status == 503
    node.set_faults(http_status=None, garbage=True)
    with pytest.raises(aiohttp.WSServerHandshakeError) as info:
        await session.ws_connect(node.url)
    assert info.value.status == 200
    node.set_faults(garbage=False, close=True)
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await session.ws_connect(node.url)
    node.set_faults(close=False, hang=True)
    with pytest.raises(asyncio.TimeoutError):
        async with asyncio.timeout(0.3):
            await session.ws_connect(node.url)


async def test_ws_message_faults(node: SimNode, session: aiohttp.ClientSession) -> None:
    async with session.ws_connect(node.url) as ws:
        node.set_faults(latency_ms=500)
        t0 = time.monotonic()
        # concurrent requests on one socket are answered concurrently: both in
        # about one latency, where one after the other would take two (1 s)
        await ws.send_json(req("system_chain", rid=1))
        await ws.send_json(req("system_chain", rid=2))
        ids = {(await recv_json(ws))["id"], (await recv_json(ws))["id"]}
        assert ids == {1, 2}
        assert 0.5 <= time.monotonic() - t0 < 0.95
        node.set_faults(latency_ms=0, truncate=True)
        await ws.send_json(req("chain_getHeader"))
        msg = await ws.receive(timeout=2)
        with pytest.raises(ValueError):
            json.loads(msg.data)
        node.set_faults(truncate=False, error_rate=1)
        await ws.send_json(req("system_chain"))
        assert (await recv_json(ws))["error"]["code"] == -32603
        node.set_faults(error_rate=0, hang=True)
        await ws.send_json(req("system_chain", rid="late"))
        with pytest.raises(asyncio.TimeoutError):
            await ws.receive(timeout=0.2)
        node.set_faults(hang=False)
        assert (await recv_json(ws))["id"] == "late"
        node.set_faults(close=True)
        await ws.send_json(req("system_chain"))
        msg = await ws.receive(timeout=2)
        assert msg.type in (aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR)


async def test_ws_answers_wait_their_bytes(node: SimNode, session: aiohttp.ClientSession) -> None:
    node.set_faults(latency_per_mib_ms=200)
    heavy = req("state_call", ["SubnetInfoRuntimeApi_get_all_metagraphs", "0x01"], rid="h")
    async with session.ws_connect(node.url, max_msg_size=0) as ws:
        t0 = time.monotonic()
        await ws.send_json(heavy)
        await ws.send_json(req("system_chain", rid="light"))  # queued behind the heavy one
        first, second = await recv_json(ws), await recv_json(ws)
        assert (first["id"], second["id"]) == ("h", "light")
        assert time.monotonic() - t0 >= 0.19


async def test_ws_status_fault_on_open_socket_closes_it(
    node: SimNode, session: aiohttp.ClientSession
) -> None:
    async with session.ws_connect(node.url) as ws:
        node.set_faults(http_status=503)
        await ws.send_json(req("system_chain"))
        msg = await ws.receive(timeout=2)
        assert msg.type is aiohttp.WSMsgType.CLOSE
        assert msg.data == aiohttp.WSCloseCode.TRY_AGAIN_LATER


async def test_stop_closes_open_and_hung_sockets(session: aiohttp.ClientSession) -> None:
    node = SimNode(clock=lambda: EPOCH, epoch=EPOCH)
    await node.start()
    ws = await session.ws_connect(node.url)
    node.set_faults(hang=True)
    await ws.send_json(req("system_chain"))
    await asyncio.sleep(0.05)
    t0 = time.monotonic()
    await node.stop()
    assert time.monotonic() - t0 < 1.5
    msg = await ws.receive(timeout=2)
    assert msg.type in (
        aiohttp.WSMsgType.CLOSE,
        aiohttp.WSMsgType.CLOSED,
        aiohttp.WSMsgType.ERROR,
    )
    await ws.close()


async def test_mute_keeps_the_socket_and_its_calls_but_pushes_nothing(
    session: aiohttp.ClientSession,
) -> None:
    """A silent feed: heads go on, calls are answered, no notification comes;
    after the mute the next one is the next new head (the kept back are gone)."""
    now = [EPOCH]
    node = SimNode(name="m", clock=lambda: now[0], epoch=EPOCH, start_height=1000, block_time=1)
    await node.start()
    try:
        async with session.ws_connect(node.url) as ws:
            await ws.send_json(req("chain_subscribeNewHeads", rid=1))
            await recv_json(ws)  # the id
            assert (await recv_json(ws))["params"]["result"]["number"] == hex(1000)
            node.set_faults(mute=True)
            now[0] += 3  # three blocks
            await ws.send_json(req("chain_getHeader", rid=2))
            answer = await recv_json(ws)  # the next message: no head came before it
            assert answer["id"] == 2 and answer["result"]["number"] == hex(1003)
            deadline = time.monotonic() + 5
            while node.state()["muted_notifications"] < 3:  # the ticker kept them back
                assert time.monotonic() < deadline, node.state()
                await asyncio.sleep(0.02)
            node.set_faults(mute=False)
            now[0] += 1
            head = await recv_json(ws)
            assert head["params"]["result"]["number"] == hex(1004)
    finally:
        await node.stop()
