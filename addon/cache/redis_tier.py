"""The edge cache's second tier in Redis, behind each machine's diskcache.

Look-ups go local first; the calls that missed ask Redis in one ``MGET`` and a
Redis hit fills the local tier, so a block fetched through any proxy of the
deployment is a hit on every other one. Entries are the same keys and JSON
texts as the local tier, each with a TTL (``redis.cache_ttl_s``) so Redis
memory stays bounded even without ``maxmemory-policy allkeys-lru``.

Writes never delay an answer: they are queued and go out with the next
pipeline (``addon/redislink/pipe.py``), one batch in flight at a time, without
a task; past ``MAX_PENDING`` queued entries new ones are dropped (counted), and
while the link is down nothing is queued.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from addon.cache.store import CacheStore
from addon.redislink.link import UNAVAILABLE, RedisLink, RedisUnavailable
from addon.rpc.later import Later
from common.jsontext import dumps, loads

log = logging.getLogger("chainproxy.cache")

MAX_PENDING = 10_000


class SharedCacheTier:
    def __init__(self, link: RedisLink, *, ttl_s: int) -> None:
        self.link = link
        self.ttl_s = ttl_s
        self.dropped = 0
        self._pending: dict[str, bytes] = {}
        self._scheduled = False  # a _send at the end of this loop turn
        self._in_flight = False  # a batch written and not answered
        self._deletes: set[asyncio.Task[None]] = set()

    def key(self, cache_key: str) -> str:
        return self.link.key("cache", cache_key)

    def lookup(
        self, keys: list[str], fill: CacheStore | None = None
    ) -> Later[list[Any | None] | None] | None:
        """``later_many`` while the link is up; None (and the fallback counted)
        while it is down: the local tier alone answers then."""
        if self.link.up:
            return self.later_many(keys, fill)
        self.link.fallback("cache")
        return None

    def later_many(
        self, keys: list[str], fill: CacheStore | None = None
    ) -> Later[list[Any | None] | None]:
        """The decoded values of ``keys`` (None where absent), each found one also
        put in ``fill`` (the local tier answers the next one); None: Redis
        unavailable. One ``MGET``, resolved by callback as the reply is read
        (no coroutine: the pipeline goes on from there)."""
        out: Later[list[Any | None] | None] = Later()

        def found(raw: Any) -> None:
            out.resolve(None if raw is UNAVAILABLE else _decode(keys, raw, fill))

        self.link.call("cache", ("MGET", *[self.key(k) for k in keys]), found)
        return out

    async def get_many(
        self, keys: list[str], fill: CacheStore | None = None
    ) -> list[Any | None] | None:
        """``later_many``, awaited."""
        return await self.later_many(keys, fill)

    def put(self, cache_key: str, value: Any) -> None:
        if not self.link.up:
            return
        if len(self._pending) >= MAX_PENDING:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning("redis cache writes behind: %d entries not shared", self.dropped)
            return
        self._pending[self.key(cache_key)] = dumps(value)
        if not self._scheduled and not self._in_flight:
            # at the end of this loop turn, so its other answers go in the same write
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._send)

    def delete(self, cache_key: str) -> None:
        """Forget a shared entry (an answer a cross-check found wrong), not waited for."""
        name = self.key(cache_key)
        self._pending.pop(name, None)
        if not self.link.up:
            return
        op = self.link.run("cache", lambda: self.link.pipe.submit("DEL", name))
        task = asyncio.ensure_future(_quietly(op))
        self._deletes.add(task)
        task.add_done_callback(self._deletes.discard)

    def _send(self) -> None:
        """One batch of ``SET``s in flight at a time (a slow Redis makes the
        queue, bounded by ``MAX_PENDING``, not the connection, grow); no task:
        the last ``SET`` carries the batch's bound and sends the next batch."""
        self._scheduled = False
        if self._in_flight or not self._pending:
            return
        batch, self._pending = self._pending, {}
        self._in_flight = True
        *first, (name, text) = batch.items()
        send = self.link.pipe.send
        for earlier, body in first:
            send(("SET", earlier, body, "EX", self.ttl_s), _ignore)
        self.link.call("cache", ("SET", name, text, "EX", self.ttl_s), self._sent)

    def _sent(self, reply: Any) -> None:
        self._in_flight = False
        if reply is UNAVAILABLE:
            return  # these entries stay local only; the link decides when to retry
        if self._pending:
            self._send()


def _ignore(reply: Any) -> None:
    """An earlier ``SET`` of a batch: the batch's last one reports for it (in order)."""


def _decode(keys: list[str], raw: list[Any], fill: CacheStore | None) -> list[Any | None]:
    out: list[Any | None] = []
    for key, item in zip(keys, raw, strict=True):
        try:
            value = None if item is None else loads(item)
        except ValueError:  # not ours, or cut short: a miss
            value = None
        if value is not None and fill is not None:
            fill.set(key, value)
        out.append(value)
    return out


async def _quietly(op: Awaitable[object]) -> None:
    try:
        await op
    except RedisUnavailable:
        pass  # it expires with its TTL
