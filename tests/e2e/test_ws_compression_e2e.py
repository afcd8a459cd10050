"""A compressed WebSocket message cannot inflate inside the proxy: the proxy
never agrees to permessage-deflate (a client that offers it gets a plain
socket that works), and a frame sent compressed anyway is a protocol error
that ends the socket, with the proxy's memory unchanged."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.harness import Stack, base_config
from tests.e2e.helpers import PROXY_DEFAULTS, call, with_wss

pytestmark = pytest.mark.e2e


@pytest.fixture
def ws_stack(tmp_path: Any) -> Iterator[Stack]:
    s = Stack(tmp_path)
    try:
        s.start_node("alpha", epoch=time.time() - 600)
        s.write_config(with_wss(base_config(tmp_path, s.nodes, **PROXY_DEFAULTS)))
        s.start_sidecar()
        s.start_proxy()
        yield s
    finally:
        s.stop()


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def test_deflate_is_never_agreed_and_a_compressed_bomb_is_refused(ws_stack: Stack) -> None:
    url = ws_stack.rpc_url().replace("http://", "ws://")
    async with aiohttp.ClientSession() as s, s.ws_connect(url, compress=15) as ws:
        assert ws.compress == 0  # offered, not agreed
        await ws.send_str(json.dumps(call("system_health", id_=1)))
        assert json.loads((await ws.receive(timeout=5)).data)["id"] == 1
    # a raw client sends a 1 KiB deflated frame that would inflate to 64 MiB
    host, port = ws_stack.proxy_url.removeprefix("http://").split(":")
    rss_before = _rss_kib(ws_stack.proxy.pid)
    reader, writer = await asyncio.open_connection(host, int(port))
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        (
            f"GET /rpc/v1/finney HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n"
        ).encode()
    )
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101") and b"permessage-deflate" not in head.lower()
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    bomb = comp.compress(b"[" * (64 << 20)) + comp.flush(zlib.Z_SYNC_FLUSH)
    bomb = bomb[:-4]  # permessage-deflate drops the sync flush's tail
    assert len(bomb) < 128 * 1024
    mask = os.urandom(4)
    payload = bytes(b ^ mask[i % 4] for i, b in enumerate(bomb))
    size = len(payload)
    header = bytes([0xC1, 0x80 | 127]) + size.to_bytes(8, "big")  # FIN, RSV1, text; masked
    writer.write(header + mask + payload)
    await writer.drain()
    async with asyncio.timeout(10):  # the proxy ends the socket: RSV1 was never agreed
        while await reader.read(65536):
            pass
    writer.close()
    assert _rss_kib(ws_stack.proxy.pid) - rss_before < 16 * 1024
