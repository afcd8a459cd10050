"""The addon's one link to the sidecar, over the shared HTTP session: the
routing snapshot (GET), usage batches (POST) and the passthrough of non-RPC
paths (dashboard, public API). The Bearer token is set here once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import aiohttp
from yarl import URL

from common.config import SidecarConfig

log = logging.getLogger("chainproxy")

_MAX_PASSTHROUGH_BODY = 16 * 1_048_576


class SidecarError(Exception):
    pass


class SidecarClient:
    def __init__(self, config: SidecarConfig, *, passthrough_timeout_s: float) -> None:
        self.base = config.url
        self.passthrough_timeout_s = passthrough_timeout_s
        self._auth = {"Authorization": f"Bearer {config.token}"} if config.token else {}
        self.session: aiohttp.ClientSession | None = None  # set with the runtime's

    def _session(self) -> aiohttp.ClientSession:
        if self.session is None:
            raise SidecarError("no HTTP session yet")
        return self.session

    async def routes(self, network: str) -> Any:
        """The routing snapshot document of one network (``SidecarError`` if none)."""
        url = f"{self.base}/api/v1/internal/routes/{network}"
        async with asyncio.timeout(5):
            async with self._session().get(url, headers=self._auth) as resp:
                if resp.status != 200:
                    raise SidecarError(f"{url} answered HTTP {resp.status}")
                return await resp.json(content_type=None)

    async def post_usage(self, batch: dict[str, Any]) -> bool:
        """POST one usage batch; True when it may leave the spool."""
        if self.session is None:
            return False
        try:
            async with asyncio.timeout(10):
                async with self.session.post(
                    f"{self.base}/api/v1/internal/usage", json=batch, headers=self._auth
                ) as resp:
                    if resp.status == 200:
                        return True
                    if resp.status in (400, 413, 422):
                        # A batch the sidecar can never accept must not block the spool.
                        log.error(
                            "sidecar rejected usage batch %s (HTTP %d): dropped",
                            batch.get("batch_id"),
                            resp.status,
                        )
                        return True
                    return False
        except (aiohttp.ClientError, TimeoutError, OSError):
            return False

    async def passthrough(
        self, method: str, path: str, body: bytes | None, headers: Mapping[str, str]
    ) -> tuple[int, bytes, list[tuple[str, str]]]:
        """Relay one request to the sidecar: (status, body, response headers).
        Raises ``TimeoutError``, ``aiohttp.ClientError`` or ``OSError`` when the
        sidecar is unreachable. Headers are the caller's (a browser's), not ours:
        no token is added."""
        # encoded=True: yarl must not decode the path we checked a second time.
        url = URL(self.base + path, encoded=True)
        async with asyncio.timeout(self.passthrough_timeout_s):
            async with self._session().request(
                method, url, data=body, headers=dict(headers), allow_redirects=False
            ) as resp:
                # the whole body: ``content.read(n)`` gives what has arrived so far
                chunks, size = [], 0
                async for chunk in resp.content.iter_chunked(1 << 16):
                    size += len(chunk)
                    if size > _MAX_PASSTHROUGH_BODY:
                        raise SidecarError(f"the answer is over {_MAX_PASSTHROUGH_BODY} bytes")
                    chunks.append(chunk)
                return resp.status, b"".join(chunks), list(resp.headers.items())
