"""This process's one connection to Redis: every command is pipelined on it.

Commands submitted during one event-loop turn leave in one write; replies are
parsed by hiredis (the C parser redis-py itself uses) straight from
``data_received`` and each resolves its caller's future in order. No task per
command, no pool, no per-command objects: a quota check costs the proxy about
a third of redis-py's asyncio client (docs/BENCHMARKS.md, Redis follow-up 2),
which matters because every request pays it.

Why not redis-py's client: its asyncio pipeline builds a pipeline object, takes
a pooled connection and awaits a read per call (~230 µs of CPU per quota check
one at a time, against ~80 µs here). redis-py is still used for what it does
well: URL parsing and the exception types the rest of the addon catches.

A caller can take its reply as a future (``submit``) or as a callback called
from ``data_received`` itself (``send``: no task wake-up, no loop turn; the
shared quota's decision goes that way, ``addon/rpc/later.py``). A command
sent while nothing else is on the connection is written at once rather than at
the end of the loop turn (at c=1 that turn was pure overhead); while others are
in flight, the commands of one turn still leave in one write.

A caller that gives up (its deadline) only cancels its own future; the reply
still arrives in order and is dropped. A lost connection fails every waiting
future (and calls every callback) with ``ConnectionError``; the next command
reconnects.

The connect's bound follows the rule of the calls' (``addon/redislink/link.py``):
it is Redis's time, not ours. A deadline timer that fires late means this
process's loop was busy (a worker starting, a burst of requests) and the
connection may already be made, its completion not yet read: the deadline moves
on, up to ``_CONNECT_CAP_S``. Timing out there on the loop's account looked
like a refused connection, so the link went down and the quota was local for a
second on a loaded machine.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import ssl
from collections import deque
from collections.abc import Callable
from typing import Any

import hiredis
from redis import exceptions as redis_errors
from redis.connection import parse_url

log = logging.getLogger("chainproxy.redis")

MAX_IN_FLIGHT = 20_000  # commands written and not answered: beyond, Redis is not keeping up
_LATE_S = 0.005  # a deadline timer this late: the event loop, not Redis, held the connect
# However busy the loop, a connect is given up after this. No request waits on it
# as such: each queued command has its own bound (``RedisLink.call``).
_CONNECT_CAP_S = 5.0


def pack(command: tuple[Any, ...]) -> bytes:
    """One command in RESP (an array of bulk strings)."""
    return b"*%d\r\n" % len(command) + b"".join([bulk(arg) for arg in command])


def bulk(arg: Any) -> bytes:
    """One argument as a RESP bulk string."""
    if isinstance(arg, bytes):
        data = arg
    elif isinstance(arg, str):
        data = arg.encode()
    elif isinstance(arg, int | float):
        data = repr(arg).encode()
    else:
        raise TypeError(f"redis argument of type {type(arg).__name__}")
    return b"$%d\r\n%s\r\n" % (len(data), data)


Reply = Callable[[Any], None]  # called with the reply, or the exception instead of one


class _Waiter:
    __slots__ = ("callback", "command", "future", "retried", "written_at")

    def __init__(
        self,
        command: tuple[Any, ...] | None,
        future: asyncio.Future[Any] | None,
        callback: Reply | None = None,
    ) -> None:
        self.command = command
        # neither: a reply nobody waits for (AUTH, SELECT, SCRIPT LOAD)
        self.future = future
        self.callback = callback
        self.retried = False
        # loop time it was written to the connection (None: still in this process)
        self.written_at: float | None = None


class RedisPipe(asyncio.Protocol):
    def __init__(self, url: str, *, connect_timeout_s: float) -> None:
        opts = parse_url(url)
        self.host: str = opts.get("host") or "localhost"
        self.port: int = int(opts.get("port") or 6379)
        self.db = int(opts.get("db") or 0)
        self.username: str | None = opts.get("username")
        self.password: str | None = opts.get("password")
        self.tls = url.startswith("rediss://")
        self.verify = opts.get("ssl_cert_reqs", "required") not in ("none", "optional")
        self.connect_timeout_s = connect_timeout_s
        self._scripts: dict[str, bytes] = {}  # sha -> source, for NOSCRIPT after a restart
        self._transport: asyncio.Transport | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._reader = hiredis.Reader(replyError=redis_errors.ResponseError)
        self._out: list[bytes] = []  # packed commands not yet written
        self._waiting: deque[_Waiter] = deque()  # written or queued, in reply order
        self._flush_scheduled = False
        self._closed = False

    # -- the API the stores use ------------------------------------------------

    def script(self, source: str) -> str:
        """Register a Lua script; its SHA1 for ``EVALSHA`` (loaded again on NOSCRIPT)."""
        sha = hashlib.sha1(source.encode()).hexdigest()
        self._scripts[sha] = source.encode()
        return sha

    def submit(self, *command: Any) -> asyncio.Future[Any]:
        """Queue one command; its reply (or the error) arrives on the future."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        refused = self._refused()
        if refused is not None:
            fut.set_exception(refused)
        else:
            self._send(_Waiter(command, fut))
        return fut

    def send(
        self, command: tuple[Any, ...], callback: Reply, packed: bytes | None = None
    ) -> _Waiter | None:
        """Queue one command; ``callback(reply)`` from ``data_received`` (or
        ``callback(error)``: a ``ResponseError``, or ``ConnectionError`` when the
        connection fails — at once if it cannot be used). ``packed``: the
        command already in RESP (a caller that sends the same one often).
        Returns its place in the queue (``written_at``: when it left this
        process), or None when it was refused at once."""
        refused = self._refused()
        if refused is not None:
            _call(callback, refused)
            return None
        w = _Waiter(command, None, callback)
        self._send(w, packed)
        return w

    @property
    def connected(self) -> bool:
        return self._transport is not None

    def connect(self) -> None:
        """Open the connection now (in the background), so the first requests do
        not pay for it inside their bound; without a running loop, the first
        command opens it."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._transport is None and (self._connecting is None or self._connecting.done()):
            self._connecting = loop.create_task(self._connect())

    async def ping(self) -> Any:
        return await self.submit("PING")

    def close(self) -> None:
        self._closed = True
        if self._connecting is not None:
            self._connecting.cancel()
        if self._transport is not None:
            self._transport.close()
        self._fail_all(redis_errors.ConnectionError("redis link closed"))

    # -- connection ----------------------------------------------------------------

    def _refused(self) -> Exception | None:
        if self._closed:
            return redis_errors.ConnectionError("redis link closed")
        if len(self._waiting) >= MAX_IN_FLIGHT:
            return redis_errors.ConnectionError("too many redis commands in flight")
        return None

    def _send(self, w: _Waiter, packed: bytes | None = None) -> None:
        assert w.command is not None
        idle = not self._waiting
        self._out.append(pack(w.command) if packed is None else packed)
        self._waiting.append(w)
        if self._transport is None:
            if self._connecting is None or self._connecting.done():
                self._connecting = asyncio.get_running_loop().create_task(self._connect())
        elif idle and not self._flush_scheduled:
            self._flush()  # nothing to batch it with: one loop turn sooner
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        context = None
        if self.tls:
            context = ssl.create_default_context()
            if not self.verify:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
        try:
            async with asyncio.timeout(None) as bound:
                deadline = _LagAwareDeadline(loop, bound, self.connect_timeout_s)
                try:
                    await loop.create_connection(lambda: self, self.host, self.port, ssl=context)
                finally:
                    deadline.cancel()
        except (OSError, TimeoutError) as e:
            self._fail_all(redis_errors.ConnectionError(f"cannot connect to redis: {e}"))

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._reader = hiredis.Reader(replyError=redis_errors.ResponseError)
        # AUTH and SELECT go ahead of whatever was queued while connecting
        hello: list[tuple[Any, ...]] = []
        if self.password is not None:
            user = (self.username,) if self.username else ()
            hello.append(("AUTH", *user, self.password))
        if self.db:
            hello.append(("SELECT", self.db))
        for command in reversed(hello):
            self._out.insert(0, pack(command))
            self._waiting.appendleft(_Waiter(None, None))
        self._flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._fail_all(redis_errors.ConnectionError(f"redis connection lost: {exc or 'closed'}"))

    def _fail_all(self, error: Exception) -> None:
        self._out.clear()
        waiting, self._waiting = self._waiting, deque()
        for w in waiting:
            if w.callback is not None:
                _call(w.callback, error)
            elif w.future is not None and not w.future.done():
                w.future.set_exception(error)

    def _flush(self) -> None:
        self._flush_scheduled = False
        if self._transport is not None and self._out:
            out, self._out = self._out, []
            self._transport.write(b"".join(out))
            # the unwritten commands are always the last ones waiting
            now = asyncio.get_running_loop().time()
            for w in itertools.islice(reversed(self._waiting), len(out)):
                w.written_at = now

    # -- replies -------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self._reader.feed(data)
        while True:
            try:
                reply = self._reader.gets()
            except hiredis.ProtocolError as e:  # not Redis on the other end
                if self._transport is not None:
                    self._transport.close()
                self._fail_all(redis_errors.ConnectionError(f"redis protocol error: {e}"))
                return
            if reply is False:
                return
            if not self._waiting:
                continue  # nobody waits (cannot happen with an honest server)
            self._answer(self._waiting.popleft(), reply)

    def _answer(self, w: _Waiter, reply: Any) -> None:
        if isinstance(reply, redis_errors.ResponseError):
            if w.command is None:  # AUTH/SELECT/SCRIPT LOAD refused: this link cannot work
                if self._transport is not None:
                    self._transport.close()
                self._fail_all(redis_errors.AuthenticationError(str(reply)[:200]))
                return
            if str(reply).startswith("NOSCRIPT") and not w.retried and self._reload(w):
                return
        if w.callback is not None:
            _call(w.callback, reply)
            return
        if w.future is None or w.future.done():
            return
        if isinstance(reply, Exception):
            w.future.set_exception(reply)
        else:
            w.future.set_result(reply)

    def _reload(self, w: _Waiter) -> bool:
        """A restarted Redis forgot our script: load it and send the call again
        (same future; Redis runs them in order, so the script is there)."""
        assert w.command is not None
        source = self._scripts.get(str(w.command[1]))
        if source is None or self._transport is None:
            return False
        w.retried = True
        self._out.append(pack(("SCRIPT", "LOAD", source)))
        self._waiting.append(_Waiter(None, None))
        self._out.append(pack(w.command))
        self._waiting.append(w)
        self._flush()
        return True


class _LagAwareDeadline:
    """Expires ``bound`` (an ``asyncio.timeout``) ``step`` seconds from now if
    its timer fires on time; a timer that fires late (the loop was busy) moves
    the deadline ``step`` on instead, up to ``_CONNECT_CAP_S`` from the start."""

    __slots__ = ("_bound", "_handle", "_loop", "_step", "_until")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, bound: asyncio.Timeout, step: float
    ) -> None:
        self._loop, self._bound, self._step = loop, bound, step
        now = loop.time()
        self._until = now + max(step, _CONNECT_CAP_S)
        self._handle = loop.call_at(now + step, self._due, now + step)

    def _due(self, due: float) -> None:
        now = self._loop.time()
        if now - due > _LATE_S and now < self._until:
            nxt = min(now + self._step, self._until)
            self._handle = self._loop.call_at(nxt, self._due, nxt)
        else:
            self._bound.reschedule(now)  # expires: the connect is cancelled, TimeoutError

    def cancel(self) -> None:
        self._handle.cancel()


def _call(callback: Reply, reply: Any) -> None:
    """A caller's bug must not stop the replies of everyone after it."""
    try:
        callback(reply)
    except Exception:
        log.exception("redis reply callback failed")
