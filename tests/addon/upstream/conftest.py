"""``make_transport``: the real upstream transports, each test run once per
client (``proxy.upstream_client``), closed after the test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from addon.upstream.forward import AiohttpTransport, Transport, new_session
from addon.upstream.lean.client import LeanTransport


class MakeTransport:
    """``make_transport(max_response_bytes)``: a transport of the client the
    test runs with; ``await make_transport.aclose()`` closes them all."""

    def __init__(self, client: str) -> None:
        self.client = client
        self.leans: list[LeanTransport] = []
        self.sessions: list[aiohttp.ClientSession] = []

    def __call__(self, max_response_bytes: int = 1_000_000) -> Transport:
        if self.client == "lean":
            self.leans.append(LeanTransport(max_response_bytes=max_response_bytes))
            return self.leans[-1]
        self.sessions.append(new_session())
        return AiohttpTransport(self.sessions[-1], max_response_bytes=max_response_bytes)

    async def aclose(self) -> None:
        """Before a raw ``asyncio.Server`` closes: it waits for kept-alive connections."""
        for t in self.leans:
            t.close()
        for s in self.sessions:
            await s.close()
        self.leans.clear()
        self.sessions.clear()


@pytest.fixture(params=["lean", "aiohttp"])
async def make_transport(request: Any) -> AsyncIterator[MakeTransport]:
    make = MakeTransport(request.param)
    yield make
    await make.aclose()
