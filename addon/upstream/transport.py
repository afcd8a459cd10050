"""The ``Transport`` protocol the forwarding loop sends through, its error, and
the real one: ``AiohttpTransport`` over one shared, pooled ClientSession
(``new_session``). ``addon.upstream.forward`` re-exports these names."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Protocol

import aiohttp
from multidict import CIMultiDict

from addon.upstream.backoff import parse_retry_after


class TransportError(Exception):
    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after  # the node's Retry-After, in seconds


class Transport(Protocol):
    async def post(self, url: str, body: bytes, timeout: float) -> tuple[int, bytes]:
        """POST ``body``; the status and whole body, or ``TransportError``."""
        ...


# built once: aiohttp would otherwise turn a dict into a CIMultiDict on every call
_HEADERS = CIMultiDict({"Content-Type": "application/json", "Accept": "application/json"})


class AiohttpTransport:
    """One pooled ClientSession for every upstream call (keep-alive across clients)."""

    def __init__(self, session: aiohttp.ClientSession, *, max_response_bytes: int) -> None:
        self._session = session
        self._max = max_response_bytes

    async def post(self, url: str, body: bytes, timeout: float) -> tuple[int, bytes]:
        try:
            async with asyncio.timeout(timeout):
                try:
                    return await self._exchange(url, body)
                except _StaleConnection:
                    # A pooled keep-alive connection the upstream closed just as we
                    # reused it (Node's 5 s keep-alive vs ours): nothing was answered,
                    # the call is a read, so send it again once on a new connection,
                    # as Go's http.Transport does, rather than call the node failed.
                    return await self._exchange(url, body)
        except _StaleConnection:
            raise TransportError("disconnected") from None
        except TimeoutError:
            raise TransportError("timeout") from None
        except aiohttp.ClientConnectorError:
            raise TransportError("connect-error") from None
        except aiohttp.ServerDisconnectedError:
            raise TransportError("disconnected") from None
        except aiohttp.ClientPayloadError:
            raise TransportError("truncated-body") from None
        except aiohttp.ClientError as e:
            raise TransportError(f"client-error:{type(e).__name__}") from None

    async def _exchange(self, url: str, body: bytes) -> tuple[int, bytes]:
        try:
            resp = await self._session.post(url, data=body, headers=_HEADERS, allow_redirects=False)
        except aiohttp.ClientConnectorError:
            raise  # could not connect at all: not a stale connection
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
            raise _StaleConnection() from e
        async with resp:
            if resp.status in (429, 503):
                retry = parse_retry_after(resp.headers.get("Retry-After"), time.time())
                if resp.status == 429 or retry is not None:  # "too many requests"
                    raise TransportError(
                        "rate-limited" if resp.status == 429 else "http-503", retry
                    )
            if (resp.content_length or 0) > self._max:
                raise TransportError("response-too-large")
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.content.iter_any():
                size += len(chunk)
                if size > self._max:
                    raise TransportError("response-too-large")
                chunks.append(chunk)
            return resp.status, b"".join(chunks)


class _StaleConnection(Exception):
    """The connection closed before any answer arrived."""


def new_session() -> aiohttp.ClientSession:
    # Idle connections are dropped after 4 s, before common node servers drop them
    # (Node/chopsticks 5 s): a connection is rarely reused just as the node closes it.
    connector = aiohttp.TCPConnector(
        limit=1024, limit_per_host=256, ttl_dns_cache=300, keepalive_timeout=4.0
    )
    return aiohttp.ClientSession(
        connector=connector,
        # Calls are stateless: an upstream's (or its load balancer's) cookie is
        # neither kept nor sent back, and no jar is consulted on every call.
        cookie_jar=aiohttp.DummyCookieJar(),
        json_serialize=json.dumps,
        auto_decompress=True,
        timeout=aiohttp.ClientTimeout(total=None),
    )
