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

The node that answered an entry (its *filler*) goes with it: in the value
(``@<filler>\n`` before the JSON, so a proxy that fills its local tier from
Redis tags the copy too) and in a sorted set per node (``cache-by:<filler>``:
member the entry's key, score when it expires), so that ``purge`` finds every
entry of a node a cross-check quarantined without scanning Redis. The set is
bounded like the entries: it expires with the last of them, and members whose
entry expired are trimmed at each write of that node's entries.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from typing import Any

from addon.cache.store import CacheStore
from addon.redislink.link import UNAVAILABLE, RedisLink, RedisUnavailable
from addon.rpc.later import Later
from common.jsontext import dumps, loads

log = logging.getLogger("chainproxy.cache")

MAX_PENDING = 10_000
PURGE_CHUNK = 500  # keys deleted per round trip of a purge
TRIM_MARGIN_S = 300  # members kept this long past their entry's expiry (clocks differ)


class SharedCacheTier:
    def __init__(self, link: RedisLink, *, ttl_s: int) -> None:
        self.link = link
        self.ttl_s = ttl_s
        self.dropped = 0
        self._pending: dict[str, tuple[bytes, str | None]] = {}  # name -> value, filler
        self._scheduled = False  # a _send at the end of this loop turn
        self._in_flight = False  # a batch written and not answered
        self._deletes: set[asyncio.Task[None]] = set()

    def key(self, cache_key: str) -> str:
        return self.link.key("cache", cache_key)

    def index_key(self, filler: str) -> str:
        """The sorted set of the entries ``filler`` answered."""
        return self.link.key("cache-by", filler)

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

    def put(self, cache_key: str, value: Any, filler: str | None = None) -> None:
        """``filler``: the node that answered it (None: not known)."""
        if not self.link.up:
            return
        if len(self._pending) >= MAX_PENDING:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning("redis cache writes behind: %d entries not shared", self.dropped)
            return
        self._pending[self.key(cache_key)] = (dumps(value), filler)
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
        send = self.link.pipe.send
        filled: dict[str, list[str]] = {}
        commands = []
        for name, (body, filler) in batch.items():
            commands.append(("SET", name, _envelope(body, filler), "EX", self.ttl_s))
            if filler is not None:
                filled.setdefault(filler, []).append(name)
        now = time.time()
        for filler, names in filled.items():
            index = self.index_key(filler)
            expires = now + self.ttl_s
            send(("ZADD", index, *[x for n in names for x in (expires, n)]), _ignore)
            send(("EXPIRE", index, self.ttl_s + TRIM_MARGIN_S), _ignore)
            send(("ZREMRANGEBYSCORE", index, "-inf", now - TRIM_MARGIN_S), _ignore)
        *first, last = commands
        for command in first:
            send(command, _ignore)
        self.link.call("cache", last, self._sent)

    async def purge(self, filler: str) -> int:
        """Every shared entry ``filler`` answered, deleted (those not yet sent
        are dropped); how many Redis held. Bounded: the set's size when it
        starts, a chunk per round trip; Redis unavailable midway: the rest
        expire with their TTL."""
        for name in [n for n, (_, f) in self._pending.items() if f == filler]:
            del self._pending[name]
        if not self.link.up:
            return 0
        index, gone = self.index_key(filler), 0
        try:
            total = await self._run("ZCARD", index)
            for _ in range(int(total) // PURGE_CHUNK + 2):
                names = await self._run("ZRANGE", index, 0, PURGE_CHUNK - 1)
                if not names:
                    break
                gone += int(await self._run("DEL", *names))
                await self._run("ZREM", index, *names)
        except RedisUnavailable:
            log.warning("redis unavailable while purging %s's entries: the rest expire", filler)
        return gone

    async def _run(self, *command: Any) -> Any:
        return await self.link.run("cache", lambda: self.link.pipe.submit(*command))

    def _sent(self, reply: Any) -> None:
        self._in_flight = False
        if reply is UNAVAILABLE:
            return  # these entries stay local only; the link decides when to retry
        if self._pending:
            self._send()


def _ignore(reply: Any) -> None:
    """An earlier ``SET`` of a batch: the batch's last one reports for it (in order)."""


def _envelope(body: bytes, filler: str | None) -> bytes:
    """An entry as Redis keeps it: its JSON, after ``@<filler>\n`` when known
    (no JSON text starts with ``@``)."""
    return body if filler is None else b"@" + filler.encode() + b"\n" + body


def _opened(item: bytes) -> tuple[bytes, str | None]:
    """An entry's JSON and filler (``_envelope`` undone)."""
    if item[:1] != b"@":
        return item, None
    head, _, body = item.partition(b"\n")
    return body, head[1:].decode(errors="replace")


def _decode(keys: list[str], raw: list[Any], fill: CacheStore | None) -> list[Any | None]:
    out: list[Any | None] = []
    for key, item in zip(keys, raw, strict=True):
        filler = None
        try:
            value = None
            if item is not None:
                body, filler = _opened(item)
                value = loads(body)
        except ValueError:  # not ours, or cut short: a miss
            value = None
        if value is not None and fill is not None:
            fill.set(key, value, filler)  # the local copy is that node's too
        out.append(value)
    return out


async def _quietly(op: Awaitable[object]) -> None:
    try:
        await op
    except RedisUnavailable:
        pass  # it expires with its TTL
