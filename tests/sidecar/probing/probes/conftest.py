"""Fixtures for the probe tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.sidecar.probing.probes.helpers import Handler, StartServer, TinyServer


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


@pytest.fixture
async def tiny_server() -> AsyncIterator[StartServer]:
    """Start throw-away aiohttp servers; all are stopped after the test."""
    servers: list[TinyServer] = []

    async def start(routes: dict[str, Handler]) -> TinyServer:
        server = await TinyServer(routes).start()
        servers.append(server)
        return server

    yield start
    for s in servers:
        await s.stop()
