"""This process's link to the deployment's Redis, and whether to use it now.

Redis is never a single point of failure (docs/OPERATIONS.md#when-things-fail,
docs/ARCHITECTURE.md#scale-out-state-redis): every use is
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

from redis import exceptions as redis_errors

from addon.redislink.pipe import RedisPipe, _Waiter
from common.config import RedisConfig

log = logging.getLogger("chainproxy.redis")

T = TypeVar("T")

_DOWN_AFTER = 3  # consecutive failures (timeouts) before the link is marked down
_PING_EVERY_S = 1.0
_HARD_CAP_S = 1.0  # however busy this process is, a call waits at most this on Redis
_LATE_S = 0.005  # a timer this late means the event loop, not Redis, held the call


class RedisUnavailable(Exception):
    """The call did not complete in time or Redis refused it: use the local store."""


UNAVAILABLE = RedisUnavailable()  # what ``RedisLink.call`` hands its callback then


class RedisLink:
    def __init__(
        self,
        config: RedisConfig,
        *,
        on_fallback: Callable[[str], None] = lambda store: None,
    ) -> None:
        self.config = config
        self.prefix = config.key_prefix
        self.timeout_s = config.timeout_ms / 1000
        # every command of this process, pipelined on one connection
        self.pipe = RedisPipe(config.url, connect_timeout_s=max(0.2, self.timeout_s))
        # connected before the first burst: a cold connect under load would
        # exceed the bound and send those calls to the local limiter
        self.pipe.connect()
        self.up = True  # optimistic: the first request finds out
        self.on_fallback = on_fallback  # a counter per store (the metric)
        self._failures = 0
        self._watcher: asyncio.Task[None] | None = None

    def key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

    async def run(self, store: str, op: Callable[[], Awaitable[T]]) -> T:
        """``op()`` against Redis within the bound; ``RedisUnavailable`` otherwise
        (counted as a fallback of ``store``).

        The bound is Redis's time, not ours: when this process's event loop is
        saturated (a burst of calls), the timer fires late and the reply may
        already sit unread in the socket, so a late timer extends the wait
        instead of blaming Redis (up to ``_HARD_CAP``); a punctual timer with no
        reply means Redis really is slow."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            async with asyncio.timeout_at(started + self.timeout_s) as cm:
                guard = _LagGuard(loop, cm, started, self.timeout_s)
                try:
                    result = await op()
                finally:
                    guard.cancel()
        except (TimeoutError, redis_errors.RedisError, OSError) as e:
            self.failed(store, e)
            raise RedisUnavailable(store) from None
        self._failures = 0
        return result

    def call(
        self,
        store: str,
        command: tuple[Any, ...],
        done: Callable[[Any], None],
        packed: bytes | None = None,
    ) -> None:
        """``command`` (``packed``: already in RESP) within the same bound as
        ``run``, without a coroutine: ``done(reply)`` is called from the
        connection's ``data_received``, or ``done(UNAVAILABLE)`` (the fallback
        counted) from the bound's timer or on an error reply."""
        bounded = _Bounded(self, store, done)
        bounded.queued = self.pipe.send(command, bounded.reply, packed)

    def fallback(self, store: str) -> None:
        """A request of ``store`` served locally because the link is down."""
        self.on_fallback(store)

    def failed(self, store: str, e: BaseException) -> None:
        self.on_fallback(store)
        self._failures += 1
        # a refused or reset connection is down now; a timeout only after a few in a row
        # (the builtin TimeoutError is an OSError: test it first)
        refused = not isinstance(e, TimeoutError | redis_errors.TimeoutError) and isinstance(
            e, redis_errors.ConnectionError | OSError
        )
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
                    # a write, not a PING: a full Redis (noeviction) answers PING
                    # and refuses every write, which sent the link up and down
                    # again every second
                    await self.pipe.submit("SET", self.key("alive"), "1", "PX", "10000")
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
        self.pipe.close()


class _Bounded:
    """One ``RedisLink.call``: its reply or its deadline, whichever comes first;
    the other is ignored (a late reply still arrives in order and is dropped).
    One timer, and the same rule as ``_LagGuard``: a timer that fires late means
    this process's loop was busy (the reply may sit unread in the socket), so
    the deadline moves on, up to ``_HARD_CAP_S``. And the bound is Redis's time
    from when the command left this process: a command written to the
    connection only lately (it waited behind a busy loop turn, on a connected
    link) gets the whole bound from then. A timer can be on time and still find
    the command written in the same loop turn: a burst of requests fills one
    turn, and the timer that ends it sees Redis had no time at all."""

    __slots__ = (
        "_done",
        "_handle",
        "_link",
        "_loop",
        "_started",
        "_store",
        "finished",
        "queued",
    )

    def __init__(self, link: RedisLink, store: str, done: Callable[[Any], None]) -> None:
        self._link, self._store, self._done = link, store, done
        self._loop = loop = asyncio.get_running_loop()
        self._started = started = loop.time()
        self._handle = loop.call_at(started + link.timeout_s, self._due, started + link.timeout_s)
        self.finished = False
        self.queued: _Waiter | None = None  # the pipe's entry: when the command was written

    def reply(self, reply: Any) -> None:
        if self.finished:
            return  # past its deadline: the caller went on without it
        self.finished = True
        self._handle.cancel()
        link = self._link
        if isinstance(reply, Exception):
            link.failed(self._store, reply)
            self._done(UNAVAILABLE)
            return
        link._failures = 0
        self._done(reply)

    def _due(self, due: float) -> None:
        if self.finished:
            return
        now = self._loop.time()
        if now - self._started < _HARD_CAP_S and (nxt := self._redis_due(now, due)) > now:
            nxt = min(nxt, self._started + _HARD_CAP_S)
            self._handle = self._loop.call_at(nxt, self._due, nxt)
            return
        self.finished = True
        self._link.failed(self._store, TimeoutError())
        self._done(UNAVAILABLE)

    def _redis_due(self, now: float, due: float) -> float:
        """When Redis's own time for this call runs out (``now`` or earlier: it has)."""
        timeout = self._link.timeout_s
        if now - due > _LATE_S:  # the timer is late: the loop was busy
            return now + timeout
        queued = self.queued
        if queued is None:
            return now
        if queued.written_at is None:  # not written yet
            # still in this process's buffer behind a busy turn; while
            # connecting it is Redis's (the network's) time
            return now + timeout if self._link.pipe.connected else now
        return queued.written_at + timeout


class _LagGuard:
    """Checks a call's deadline just before ``asyncio.timeout`` would: if the
    check itself runs late, the loop was busy, so the deadline moves on."""

    __slots__ = ("_cm", "_handle", "_loop", "_started", "_step")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, cm: asyncio.Timeout, started: float, step: float
    ) -> None:
        self._loop, self._cm, self._started, self._step = loop, cm, started, step
        self._handle = loop.call_at(started + step - 0.001, self._check, started + step - 0.001)

    def _check(self, due: float) -> None:
        now = self._loop.time()
        if now - due > _LATE_S and now - self._started < _HARD_CAP_S:
            nxt = now + self._step
            self._cm.reschedule(min(nxt, self._started + _HARD_CAP_S))
            self._handle = self._loop.call_at(nxt - 0.001, self._check, nxt - 0.001)

    def cancel(self) -> None:
        self._handle.cancel()


def _describe(e: BaseException, url: str) -> str:
    """The error for a log line, never with the URL's password in it."""
    text = f"{type(e).__name__}: {e}"[:200]
    if "@" in url:
        secret = url.split("://", 1)[-1].rsplit("@", 1)[0]
        if secret:
            text = text.replace(secret, "***")
    return text
