"""Idle connections, through a real mitmdump: one that never sends a byte, and
a kept-alive one after its answer, are closed after twice read_timeout_s (not
mitmproxy's 600 s); a quiet WebSocket stays open."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import aiohttp
import pytest

from tests.e2e.harness import Stack, base_config
from tests.e2e.helpers import PROXY_DEFAULTS, call, with_wss

pytestmark = pytest.mark.e2e

TIMEOUT_S = 1.0  # read_timeout_s: idle connections go after 2 s


@pytest.fixture(scope="module")
def idle_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One stack for the module: each test opens (and closes) connections of its own."""
    tmp_path = tmp_path_factory.mktemp("idle")
    s = Stack(tmp_path)
    try:
        s.start_node("alpha", epoch=time.time() - 600)
        config = base_config(tmp_path, s.nodes, **PROXY_DEFAULTS, read_timeout_s=TIMEOUT_S)
        s.write_config(with_wss(config))
        s.start_sidecar()
        s.start_proxy()
        yield s
    finally:
        s.stop()


async def _closed_after(reader: asyncio.StreamReader, limit_s: float) -> float:
    t0 = time.monotonic()
    async with asyncio.timeout(limit_s):
        while await reader.read(65536):
            pass  # an answer's bytes; then the close
    return time.monotonic() - t0


async def test_idle_connections_are_closed_and_quiet_sockets_are_not(idle_stack: Stack) -> None:
    host, port = idle_stack.proxy_url.removeprefix("http://").split(":")
    # a connection that never sends a byte
    reader, writer = await asyncio.open_connection(host, int(port))
    assert await _closed_after(reader, 10) < 2 * TIMEOUT_S + 2
    writer.close()
    # a kept-alive connection, idle after its answer
    reader, writer = await asyncio.open_connection(host, int(port))
    body = json.dumps(call("system_health")).encode()
    writer.write(
        b"POST /rpc/v1/finney HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert await _closed_after(reader, 10) < 2 * TIMEOUT_S + 2
    writer.close()
    # a WebSocket that says nothing for longer stays open: an idle connection
    # opened with it is closed meanwhile (the proxy did close what was idle) ...
    ws_url = idle_stack.rpc_url().replace("http://", "ws://")
    async with aiohttp.ClientSession() as s, s.ws_connect(ws_url) as ws:
        reader, writer = await asyncio.open_connection(host, int(port))
        assert await _closed_after(reader, 10) < 2 * TIMEOUT_S + 2
        writer.close()
        await asyncio.sleep(0.5)  # ... and half a second past it, the socket ...
        assert not ws.closed
        await ws.send_str(json.dumps(call("system_health", id_=5)))  # ... still answers
        msg = await ws.receive(timeout=5)
        assert json.loads(msg.data)["id"] == 5


async def test_http2_is_not_spoken_and_its_connection_does_not_linger(idle_stack: Stack) -> None:
    host, port = idle_stack.proxy_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")  # h2c with prior knowledge
    await writer.drain()
    answer = b""
    async with asyncio.timeout(2 * TIMEOUT_S + 2):  # refused, then closed
        while chunk := await reader.read(65536):
            answer += chunk
    assert not answer or answer.startswith(b"HTTP/1.1 4")  # no HTTP/2 frames
    writer.close()
