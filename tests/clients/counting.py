"""The JSON-RPC calls passing an endpoint front (``forwarder.py --count``): what
really reaches the node, counted by method, a batch per call.

The front reads the client side of each connection as HTTP/1.1 requests
(``Content-Length`` or chunked bodies) and, after a WebSocket upgrade, as
client frames (masked, possibly fragmented); every request body or text/binary
message that parses as JSON-RPC adds one count per call. The bytes go on to
the node unchanged, except that a WebSocket handshake loses its
``Sec-WebSocket-Extensions`` header, so no compression is negotiated and the
frames stay readable. Calls are counted by who sent them: ``probe`` when the
User-Agent is the sidecar's (``chainproxy-sidecar/…``: its health probes),
``rpc`` for everything else (the proxy's upstream calls, or clients sent
straight to the front). ``GET /_front/counts`` on the front's own port answers
``{"rpc": {method: n}, "probe": {…}}`` instead of being forwarded.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

COUNTS_PATH = b"/_front/counts"
SIDECAR_AGENT = "chainproxy-sidecar"

Send = Callable[[bytes], Awaitable[None]]


class CallCounts:
    def __init__(self) -> None:
        self.by_source: dict[str, Counter[str]] = {"rpc": Counter(), "probe": Counter()}

    def add(self, body: bytes, agent: str) -> None:
        try:
            doc = json.loads(body)
        except ValueError:
            return  # not JSON-RPC: not a call
        calls = doc if isinstance(doc, list) else [doc]
        source = "probe" if agent.startswith(SIDECAR_AGENT) else "rpc"
        for call in calls:
            if isinstance(call, dict) and isinstance(call.get("method"), str):
                self.by_source[source][call["method"]] += 1

    def answer(self) -> bytes:
        body = json.dumps({k: dict(v) for k, v in self.by_source.items()}).encode()
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        return head.encode() + body


def _headers(head: bytes) -> tuple[bytes, bytes, dict[str, str]]:
    lines = head.split(b"\r\n")
    method, _, rest = lines[0].partition(b" ")
    path = rest.partition(b" ")[0]
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if sep:
            headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    return method, path, headers


def _without_extensions(head: bytes) -> bytes:
    lines = head.split(b"\r\n")
    kept = [ln for ln in lines if not ln.lower().startswith(b"sec-websocket-extensions:")]
    return b"\r\n".join(kept)


async def _body(reader: asyncio.StreamReader, headers: dict[str, str]) -> tuple[bytes, bytes]:
    """(raw bytes as sent, decoded body) of one request body."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raw, body = bytearray(), bytearray()
        while True:
            line = await reader.readuntil(b"\r\n")
            raw += line
            size = int(line.split(b";")[0].strip(), 16)
            chunk = await reader.readexactly(size + 2)  # the data and its CRLF
            raw += chunk
            if size == 0:
                return bytes(raw), bytes(body)  # (trailers are not used by any client here)
            body += chunk[:-2]
    data = await reader.readexactly(int(headers.get("content-length", "0")))
    return data, data


async def count_http(
    reader: asyncio.StreamReader, send: Send, reply: Send, counts: CallCounts
) -> None:
    """Read the client side of one connection until it ends: requests are counted
    and passed to ``send`` as read; a counts request is answered with ``reply``."""
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return
        method, path, headers = _headers(head)
        agent = headers.get("user-agent", "")
        if method == b"GET" and path == COUNTS_PATH:
            await reply(counts.answer())
            return
        if headers.get("upgrade", "").lower() == "websocket":
            await send(_without_extensions(head))
            await _count_frames(reader, send, counts, agent)
            return
        raw, body = await _body(reader, headers)
        counts.add(body, agent)
        await send(head + raw)


async def _count_frames(
    reader: asyncio.StreamReader, send: Send, counts: CallCounts, agent: str
) -> None:
    """Client WebSocket frames (RFC 6455 section 5.2), passed on as read."""
    message = bytearray()
    while True:
        try:
            first = await reader.readexactly(2)
            fin, opcode = first[0] & 0x80, first[0] & 0x0F
            masked, size = first[1] & 0x80, first[1] & 0x7F
            extra = b""
            if size == 126:
                extra = await reader.readexactly(2)
                size = int.from_bytes(extra, "big")
            elif size == 127:
                extra = await reader.readexactly(8)
                size = int.from_bytes(extra, "big")
            mask = await reader.readexactly(4) if masked else b""
            payload = await reader.readexactly(size)
        except asyncio.IncompleteReadError:
            return
        await send(first + extra + mask + payload)
        if opcode in (0x0, 0x1, 0x2):  # data: continuation, text, binary
            message += _unmask(payload, mask) if mask else payload
            if fin:
                counts.add(bytes(message), agent)
                message.clear()
        elif opcode == 0x8:  # close
            return


def _unmask(payload: bytes, mask: bytes) -> bytes:
    # XOR with the 4-byte mask repeated: one big-integer operation, not a byte loop
    n = len(payload)
    key = (mask * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big")


def counts_of(port: int, timeout: float = 5.0) -> dict[str, Any]:
    """A counting front's counts so far (blocking; for the test and the runner)."""
    url = f"http://127.0.0.1:{port}{COUNTS_PATH.decode()}"
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())
