"""The link to the sidecar against a real aiohttp server: a usage batch leaves the
spool only when the sidecar took it or refused it for good (a 503 keeps it)."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from aiohttp import web

from addon.reporting.sidecar_client import SidecarClient
from addon.reporting.usage import new_batch
from common.config import SidecarConfig

Batch = dict[str, Any]


@pytest.mark.parametrize(("status", "leaves_the_spool"), [(200, True), (503, False), (400, True)])
async def test_a_503_from_the_sidecar_keeps_the_batch(
    aiohttp_server: Any, status: int, leaves_the_spool: bool
) -> None:
    seen: list[Batch] = []

    async def usage(request: web.Request) -> web.Response:
        seen.append(await request.json())
        body = {"error": {"code": status, "message": "database or disk is full"}}
        return web.json_response(body, status=status, headers={"Retry-After": "10"})

    app = web.Application()
    app.router.add_post("/api/v1/internal/usage", usage)
    server = await aiohttp_server(app)
    client = SidecarClient(SidecarConfig(url=str(server.make_url(""))), passthrough_timeout_s=5)
    async with aiohttp.ClientSession() as session:
        client.session = session
        batch = new_batch([{"requests": 1}], 1.0)
        assert await client.post_usage(batch) is leaves_the_spool
    assert seen == [batch]


async def test_a_passthrough_answer_in_slow_pieces_is_read_whole(aiohttp_server: Any) -> None:
    """A sidecar on another host sends a large page in pieces: the whole body
    is relayed (a single read once gave what had arrived: 16 KiB of 92, a 200
    with broken JSON); one over the bound is an error, never cut short."""
    import asyncio

    from addon.reporting import sidecar_client

    piece = b"x" * 16_384

    async def slow(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        for _ in range(int(request.query.get("n", "6"))):
            await resp.write(piece)
            await asyncio.sleep(0.005)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/page", slow)
    server = await aiohttp_server(app)
    client = SidecarClient(SidecarConfig(url=str(server.make_url(""))), passthrough_timeout_s=5)
    async with aiohttp.ClientSession() as session:
        client.session = session
        status, body, _ = await client.passthrough("GET", "/page", None, {})
        assert status == 200 and body == piece * 6
        bound = sidecar_client._MAX_PASSTHROUGH_BODY
        sidecar_client._MAX_PASSTHROUGH_BODY = 5 * len(piece)
        try:
            with pytest.raises(sidecar_client.SidecarError, match="over"):
                await client.passthrough("GET", "/page?n=6", None, {})
        finally:
            sidecar_client._MAX_PASSTHROUGH_BODY = bound
