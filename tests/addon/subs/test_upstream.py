"""One WebSocket to one node (``UpstreamSocket``) against a real node stand-in on
127.0.0.1 (``WsNode``): calls matched by id, notifications routed by subscription
id (one sent right after the answer, or even before it, is never missed), node
errors and a node going away failing what waits. Every wait is bounded."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from addon.subs.upstream import UpstreamError, UpstreamSocket
from tests.addon.helpers import NodeChain, WsNode, block_hash

BOUND_S = 10.0


@asynccontextmanager
async def connected(node: WsNode) -> AsyncIterator[tuple[UpstreamSocket, list[str]]]:
    """A socket to ``node`` (started here) and the reasons it reported closing."""
    await node.start()
    closes: list[str] = []
    sock = UpstreamSocket("endpoint-a", node.url, on_close=lambda _s, why: closes.append(why))
    try:
        async with aiohttp.ClientSession() as session:
            await sock.connect(session, timeout=2.0)
            yield sock, closes
            await sock.close()
    finally:
        await node.stop()


async def test_concurrent_calls_get_their_own_answers() -> None:
    async with asyncio.timeout(BOUND_S), connected(WsNode("a", NodeChain())) as (sock, _):
        got = await asyncio.gather(
            *(sock.call("chain_getBlockHash", [n], timeout=2.0) for n in (3, 1, 2))
        )
        assert got == [block_hash(3), block_hash(1), block_hash(2)]


@pytest.mark.parametrize("early", [False, True], ids=["after-the-answer", "before-the-answer"])
async def test_the_first_notification_reaches_the_handler_wherever_it_comes(early: bool) -> None:
    node = WsNode("a", NodeChain(height=10))
    node.early = early  # chopsticks sends a first value before the answer naming it
    async with asyncio.timeout(BOUND_S), connected(node) as (sock, _):
        heads: list[Any] = []
        sub = await sock.subscribe("chain_subscribeNewHeads", [], heads.append, timeout=2.0)
        assert sub == "a-sub-1" and len(sock) == 1
        await node.push()
        while len(heads) < 2:  # noqa: ASYNC110 (a poll, bounded by the timeout)
            await asyncio.sleep(0.01)
        assert [h["number"] for h in heads] == ["0xa", "0xb"]


async def test_unsubscribe_tells_the_node_and_stops_the_routing() -> None:
    node = WsNode("a", NodeChain(height=10))
    async with asyncio.timeout(BOUND_S), connected(node) as (sock, _):
        heads: list[Any] = []
        sub = await sock.subscribe("chain_subscribeNewHeads", [], heads.append, timeout=2.0)
        await sock.unsubscribe("chain_unsubscribeNewHeads", sub)
        assert len(sock) == 0 and ("chain_unsubscribeNewHeads", [sub]) in node.calls
        await node.push()
        await asyncio.sleep(0.05)
        assert len(heads) <= 1  # at most the head sent with the answer


async def test_a_node_error_is_an_upstream_error() -> None:
    async with asyncio.timeout(BOUND_S), connected(WsNode("a", NodeChain())) as (sock, _):
        with pytest.raises(UpstreamError, match="rpc-error:Method not found"):
            await sock.call("author_submitExtrinsic", ["0x00"], timeout=2.0)
        assert not sock.closed  # the socket stays usable
        assert await sock.call("chain_getBlockHash", [1], timeout=2.0) == block_hash(1)


async def test_a_call_the_node_never_answers_times_out() -> None:
    node = WsNode("a", NodeChain(), silent=True)
    async with asyncio.timeout(BOUND_S), connected(node) as (sock, _):
        with pytest.raises(UpstreamError, match="timeout"):
            await sock.call("chain_getBlockHash", [1], timeout=0.1)


async def test_the_node_closing_fails_what_waits_and_is_reported_once() -> None:
    node = WsNode("a", NodeChain(), silent=True)
    async with asyncio.timeout(BOUND_S), connected(node) as (sock, closes):
        waiting = asyncio.ensure_future(sock.call("chain_getBlockHash", [1], timeout=5.0))
        while not node.calls:  # noqa: ASYNC110 (a poll, bounded by the timeout)
            await asyncio.sleep(0.01)
        await node.kill()
        with pytest.raises(UpstreamError):
            await waiting
        assert sock.closed and closes == [sock.close_reason] and closes != ["closed-by-proxy"]
        with pytest.raises(UpstreamError, match="closed"):
            await sock.call("chain_getBlockHash", [1], timeout=1.0)
    assert len(closes) == 1  # the proxy's close after it changes nothing


async def test_closed_by_the_proxy_is_its_own_reason() -> None:
    async with asyncio.timeout(BOUND_S), connected(WsNode("a", NodeChain())) as (sock, closes):
        await sock.close()
        assert sock.closed and closes == ["closed-by-proxy"]


async def test_a_node_that_does_not_listen_is_a_connect_error() -> None:
    # a port bound and not listening: refused, and no other socket can take it meanwhile
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        sock = UpstreamSocket("endpoint-a", f"ws://127.0.0.1:{port}/", on_close=lambda *_: None)
        async with asyncio.timeout(BOUND_S), aiohttp.ClientSession() as session:
            with pytest.raises(UpstreamError, match="connect-error"):
                await sock.connect(session, timeout=2.0)
