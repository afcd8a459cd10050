"""The real upstream transport against tiny aiohttp servers that misbehave."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from addon.forward import AiohttpTransport, TransportError, new_session


async def _server(aiohttp_server: Any, handler: Any) -> str:
    app = web.Application()
    app.router.add_post("/", handler)
    server = await aiohttp_server(app)
    return str(server.make_url("/"))


async def test_an_answer_larger_than_the_limit_is_refused(aiohttp_server: Any) -> None:
    async def big(_: web.Request) -> web.Response:
        return web.Response(body=b"x" * 200_000, content_type="application/json")

    async def big_chunked(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        for _ in range(50):
            await resp.write(b"y" * 10_000)
        return resp

    async with new_session() as session:
        t = AiohttpTransport(session, max_response_bytes=100_000)
        for handler in (big, big_chunked):
            url = await _server(aiohttp_server, handler)
            with pytest.raises(TransportError) as e:
                await t.post(url, b"{}", 5)
            assert e.value.reason == "response-too-large"


async def test_hang_after_headers_is_cut_at_the_attempt_timeout(aiohttp_server: Any) -> None:
    async def stall(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        await resp.write(b'{"jsonrpc":')
        await asyncio.sleep(30)
        return resp

    url = await _server(aiohttp_server, stall)
    async with new_session() as session:
        t = AiohttpTransport(session, max_response_bytes=1_000_000)
        start = time.monotonic()
        with pytest.raises(TransportError) as e:
            await t.post(url, b"{}", 0.5)
        assert e.value.reason == "timeout" and time.monotonic() - start < 2


async def test_refused_connection_is_a_connect_error() -> None:
    async with aiohttp.ClientSession() as session:
        t = AiohttpTransport(session, max_response_bytes=1000)
        with pytest.raises(TransportError) as e:
            await t.post("http://127.0.0.1:9/", b"{}", 2)
        assert e.value.reason == "connect-error"


async def test_upstream_cookies_are_not_kept_or_sent_back(aiohttp_server: Any) -> None:
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
    async with new_session() as session:
        t = AiohttpTransport(session, max_response_bytes=1_000_000)
        for _ in range(3):
            status, _ = await t.post(url, b"{}", 5)
            assert status == 200
    assert seen == [None, None, None]
