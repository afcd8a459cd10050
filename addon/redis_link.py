"""This process's link to the deployment's Redis, and whether to use it now.

Redis is never a single point of failure (DESIGN.md section 10): every use is
bounded by ``redis.timeout_ms`` and a failed one falls back to the local store
for that request. After ``_DOWN_AFTER`` failures in a row (or one refused
connection) the link is marked down: one log line, and requests stop waiting on
Redis at all. A watcher then pings once a second and marks it up again, with
another line, so the quota is shared again within a few seconds of Redis
coming back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis import exceptions as redis_errors

from common.config import RedisConfig

log = logging.getLogger("chainproxy.redis")

T = TypeVar("T")

_DOWN_AFTER = 3  # consecutive failures (timeouts) before the link is marked down
_PING_EVERY_S = 1.0


class RedisUnavailable(Exception):
    """The call did not complete in time or Redis refused it: use the local store."""


class RedisLink:
    def __init__(
        self,
        config: RedisConfig,
        *,
        client: Any | None = None,
        on_fallback: Callable[[str], None] = lambda store: None,
    ) -> None:
        self.config = config
        self.prefix = config.key_prefix
        self.timeout_s = config.timeout_ms / 1000
        self.client = client if client is not None else self._connect(config)
        self.up = True  # optimistic: the first request finds out
        self.on_fallback = on_fallback  # a counter per store (the metric)
        self._failures = 0
        self._watcher: asyncio.Task[None] | None = None

    @staticmethod
    def _connect(config: RedisConfig) -> Any:
        # No retries inside redis-py: our bound is the whole budget, the fallback is ours.
        return aioredis.Redis.from_url(
            config.url,
            socket_timeout=max(1.0, config.timeout_ms / 1000),
            socket_connect_timeout=max(0.2, config.timeout_ms / 1000),
            retry_on_timeout=False,
            retry=None,
            health_check_interval=0,
            decode_responses=False,
        )

    def key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    async def run(self, store: str, op: Callable[[], Awaitable[T]]) -> T:
        """``op()`` against Redis within the bound; ``RedisUnavailable`` otherwise
        (counted as a fallback of ``store``)."""
        try:
            async with asyncio.timeout(self.timeout_s):
                result = await op()
        except (TimeoutError, redis_errors.RedisError, OSError) as e:
            self.failed(store, e)
            raise RedisUnavailable(store) from None
        self._failures = 0
        return result

    def fallback(self, store: str) -> None:
        """A request of ``store`` served locally because the link is down."""
        self.on_fallback(store)

    def failed(self, store: str, e: BaseException) -> None:
        self.on_fallback(store)
        self._failures += 1
        refused = isinstance(e, redis_errors.ConnectionError | OSError)
        if self.up and (refused or self._failures >= _DOWN_AFTER):
            self.up = False
            log.warning(
                "redis %s unavailable (%s): rate limit and cache fall back to this "
                "process's local stores until it answers again",
                self.config.safe_url,
                _describe(e, self.config.url),
            )
            self._start_watcher()

    def _start_watcher(self) -> None:
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        while not self.up:
            await asyncio.sleep(_PING_EVERY_S)
            try:
                async with asyncio.timeout(max(self.timeout_s, 0.5)):
                    await self.client.ping()
            except (TimeoutError, redis_errors.RedisError, OSError):
                continue
            self._failures = 0
            self.up = True
            log.warning(
                "redis %s answers again: the quota and cache are shared again",
                self.config.safe_url,
            )

    async def close(self) -> None:
        if self._watcher is not None:
            self._watcher.cancel()
        try:
            await self.client.aclose()
        except Exception as e:  # closing a dead link: nothing to save
            log.debug("redis close: %s", type(e).__name__)


def _describe(e: BaseException, url: str) -> str:
    """The error for a log line, never with the URL's password in it."""
    text = f"{type(e).__name__}: {e}"[:200]
    if "@" in url:
        secret = url.split("://", 1)[-1].rsplit("@", 1)[0]
        if secret:
            text = text.replace(secret, "***")
    return text
