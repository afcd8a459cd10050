"""The real upstream transports (lean and aiohttp, see conftest) against tiny
servers that misbehave."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from aiohttp import web

from addon.upstream.forward import TransportError
from tests.addon.upstream.conftest import MakeTransport


async def _server(aiohttp_server: Any, handler: Any) -> str:
    app = web.Application()
    app.router.add_post("/", handler)
    server = await aiohttp_server(app)
    return str(server.make_url("/"))


async def test_an_answer_larger_than_the_limit_is_refused(
    aiohttp_server: Any, make_transport: MakeTransport
) -> None:
    async def big(_: web.Request) -> web.Response:
        return web.Response(body=b"x" * 200_000, content_type="application/json")

    async def big_chunked(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        for _ in range(50):
            await resp.write(b"y" * 10_000)
        return resp

    t = make_transport(100_000)
    for handler in (big, big_chunked):
        url = await _server(aiohttp_server, handler)
        with pytest.raises(TransportError) as e:
            await t.post(url, b"{}", 5)
        assert e.value.reason == "response-too-large"


async def test_hang_after_headers_is_cut_at_the_attempt_timeout(
    aiohttp_server: Any, make_transport: MakeTransport
) -> None:
    async def stall(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        await resp.write(b'{"jsonrpc":')
        await asyncio.sleep(30)
        return resp

    url = await _server(aiohttp_server, stall)
    t = make_transport(1_000_000)
    start = time.monotonic()
    with pytest.raises(TransportError) as e:
        await t.post(url, b"{}", 0.5)
    assert e.value.reason == "timeout" and time.monotonic() - start < 2


async def test_refused_connection_is_a_connect_error(make_transport: MakeTransport) -> None:
    t = make_transport(1000)
    with pytest.raises(TransportError) as e:
        await t.post("http://127.0.0.1:9/", b"{}", 2)
    assert e.value.reason == "connect-error"


async def test_upstream_cookies_are_not_kept_or_sent_back(
    aiohttp_server: Any, make_transport: MakeTransport
) -> None:
    """Calls are stateless: one client's call must not carry state an upstream (or
    its load balancer) handed out on another's."""
    seen: list[str | None] = []

    async def sticky(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Cookie"))
        resp = web.json_response({"jsonrpc": "2.0", "id": 1, "result": None})
        resp.set_cookie("AWSALB", "node-7")
        return resp

    # by name: aiohttp's default jar ignores cookies set by an IP address
    url = (await _server(aiohttp_server, sticky)).replace("127.0.0.1", "localhost")
    t = make_transport(1_000_000)
    for _ in range(3):
        status, _ = await t.post(url, b"{}", 5)
        assert status == 200
    assert seen == [None, None, None]


async def _keepalive_server(close_on_reuse: bool) -> tuple[asyncio.Server, list[int]]:
    """A raw HTTP/1.1 server: answers the first request on a connection with
    keep-alive; a second request on the same connection is met (if
    ``close_on_reuse``) by closing it unanswered, as a node whose keep-alive
    timer fired just as the request arrived. Counts requests per connection."""
    per_conn: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        per_conn.append(0)
        i = len(per_conn) - 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                per_conn[i] += 1
                if per_conn[i] > 1 and close_on_reuse:
                    break
                body = b'{"jsonrpc":"2.0","id":1,"result":1}'
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, per_conn


async def test_a_pooled_connection_closed_by_the_node_is_retried_on_a_new_one(
    make_transport: MakeTransport,
) -> None:
    server, per_conn = await _keepalive_server(close_on_reuse=True)
    port = server.sockets[0].getsockname()[1]
    async with server:
        t = make_transport(1_000_000)
        for _ in range(3):
            status, raw = await t.post(f"http://127.0.0.1:{port}/", b"{}", 5)
            assert status == 200 and b'"result":1' in raw
        await make_transport.aclose()
    # every reuse was cut and the call went on over a fresh connection
    assert len(per_conn) == 3 and per_conn[:2] == [2, 2]


async def test_a_node_that_always_cuts_is_still_a_failure_not_a_loop(
    make_transport: MakeTransport,
) -> None:
    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(100)
        writer.transport.abort()

    server = await asyncio.start_server(cut, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        t = make_transport(1_000_000)
        with pytest.raises(TransportError) as e:
            await t.post(f"http://127.0.0.1:{port}/", b"{}", 5)
        assert e.value.reason == "disconnected"
        await make_transport.aclose()
