"""The proxy's upstream HTTP client: keep-alive HTTP/1.1 POSTs on an
``asyncio.Protocol``, answers parsed by ``httptools`` (llhttp, uvicorn's parser).

Why not aiohttp's ClientSession (still there, ``proxy.upstream_client:
aiohttp``): it spends ~3x the CPU per upstream call (``bench/
bench_upstream_client.py``, docs/BENCHMARKS.md issue 28) on what a JSON-RPC
POST does not use (cookies, redirects, streaming readers, trace hooks). Here a
call is: an idle connection (or a new one), one write, one future.

``AiohttpTransport``'s semantics: the same ``TransportError`` reasons, one
retry on a new connection when a reused one closes before any byte of the
answer, idle connections dropped after 4 s, the size cap, gzip/deflate
decoded, no redirects, no cookies, 256 connections per host and 1024 in all
(callers beyond wait). A cancelled post (the hedge's loser, a timeout) aborts
its connection: only a whole answer frees one for another call.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
import time
import zlib
from collections.abc import Callable
from urllib.parse import quote, unquote, urlsplit

import aiohappyeyeballs

from addon.upstream.backoff import parse_retry_after
from addon.upstream.forward import TransportError
from addon.upstream.lean.conn import Answer, Conn, Slots, Stale, time_out

KEEPALIVE_S = 4.0  # node servers (Node, chopsticks) drop idle connections at 5 s
LIMIT_PER_HOST = 256
LIMIT = 1024
MAX_TARGETS = 4096  # URLs parsed and kept (they come from the config: a handful)
_USER_AGENT = b"chainproxy"  # some providers' gateways refuse a request without one


class _Host:
    __slots__ = ("idle", "slots")

    def __init__(self) -> None:
        self.idle: list[Conn] = []  # most recently used last (LIFO: cold ones expire)
        self.slots = Slots(LIMIT_PER_HOST)


class _Target:
    """A URL, parsed once: where to connect and the request's head."""

    __slots__ = ("head", "host", "key", "port", "tls")

    def __init__(self, url: str) -> None:
        u = urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(url)
        self.tls = u.scheme == "https"
        self.host = u.hostname
        self.port = u.port or (443 if self.tls else 80)
        host = self.host if self.host.isascii() else self.host.encode("idna").decode()
        if ":" in host:  # IPv6 literal
            host = f"[{host}]"
        if self.port != (443 if self.tls else 80):
            host = f"{host}:{self.port}"
        path = quote(u.path or "/", safe="/%:@!$&'()*+,;=-._~")
        if u.query:
            path += "?" + quote(u.query, safe="/%:@!$&'()*+,;=-._~?")
        lines = [
            f"POST {path} HTTP/1.1".encode(),
            b"Host: " + host.encode(),
            b"User-Agent: " + _USER_AGENT,
            b"Content-Type: application/json",
            b"Accept: application/json",
            b"Accept-Encoding: gzip, deflate",
        ]
        if u.username is not None:  # as aiohttp: the userinfo becomes basic auth
            creds = f"{unquote(u.username)}:{unquote(u.password or '')}".encode()
            lines.append(b"Authorization: Basic " + base64.b64encode(creds))
        self.head = b"\r\n".join(lines) + b"\r\nContent-Length: "
        self.key = (self.tls, self.host, self.port)


class LeanTransport:
    """``forward.Transport`` over pooled keep-alive connections, per host."""

    def __init__(
        self,
        *,
        max_response_bytes: int,
        ssl_context: ssl.SSLContext | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        keepalive_s: float = KEEPALIVE_S,
    ) -> None:
        self.max_response_bytes = max_response_bytes  # a reload may change it
        self._ssl = ssl_context
        self._clock = clock
        self._wall = wall  # for a Retry-After given as an HTTP date
        self._keepalive_s = keepalive_s
        self._targets: dict[str, _Target] = {}
        self._hosts: dict[tuple[bool, str, int], _Host] = {}
        self._slots = Slots(LIMIT)
        self._sweep: asyncio.TimerHandle | None = None
        self._closed = False

    async def post(self, url: str, body: bytes, timeout: float) -> tuple[int, bytes]:
        target = self._targets.get(url)
        if target is None:
            try:
                target = _Target(url)
            except ValueError:
                raise TransportError("client-error:InvalidURL") from None
            if len(self._targets) >= MAX_TARGETS:
                self._targets.clear()
            self._targets[url] = target
        request = b"%s%d\r\n\r\n%s" % (target.head, len(body), body)
        try:
            host = self._hosts.get(target.key)
            if host is not None and (conn := self._reuse(host)) is not None:
                status, raw, encoding, retry_after = await self._reused(
                    target, host, conn, request, timeout
                )
            else:
                async with asyncio.timeout(timeout):
                    status, raw, encoding, retry_after = await self._call(target, request)
        except TimeoutError:
            raise TransportError("timeout") from None
        except (TransportError, asyncio.CancelledError):
            raise
        except Exception as e:  # a bug here or below: the node's attempt fails, not the call
            raise TransportError(f"client-error:{type(e).__name__}") from e
        if status in (429, 503):
            retry = parse_retry_after(retry_after, self._wall())
            if status == 429 or retry is not None:  # "too many requests"
                raise TransportError("rate-limited" if status == 429 else "http-503", retry)
        if encoding in (b"gzip", b"x-gzip", b"deflate") and raw:
            raw = _decode(raw, encoding, self.max_response_bytes)
        return status, raw

    def _reuse(self, host: _Host) -> Conn | None:
        """An idle connection with both places taken, without a coroutine, when
        there is room now and one is idle; else None (``_call`` waits its turn)."""
        if not host.idle or not self._slots.try_take():
            return None
        if host.slots.try_take():
            conn = self._idle(host)
            if conn is not None:
                return conn
            host.slots.release()
        self._slots.release()
        return None

    async def _reused(
        self, target: _Target, host: _Host, conn: Conn, request: bytes, timeout: float
    ) -> Answer:
        """``_call`` on a connection ``_reuse`` took: the answer's future
        awaited with a timer (no timeout context, no coroutine per layer, the
        bulk of what a pooled call cost over its socket work). A connection the
        node closed just as it was reused goes the whole way (``_call``) in the
        time left, as there."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        answer = conn.send(request, self.max_response_bytes)
        timer = loop.call_at(deadline, time_out, answer)
        done = False
        try:
            result = await answer
            done = True
            return result
        except Stale:
            pass
        finally:
            timer.cancel()
            self._finish(host, conn, done)
            host.slots.release()
            self._slots.release()
        async with asyncio.timeout_at(deadline):
            return await self._call(target, request)

    async def _call(self, target: _Target, request: bytes) -> Answer:
        host = self._hosts.get(target.key) or self._hosts.setdefault(target.key, _Host())
        async with self._slots, host.slots:
            conn = self._idle(host) or await self._connect(target)
            try:
                return await self._exchange(host, conn, request)
            except Stale:
                if not conn.reused:  # a fresh connection cut: the node's doing
                    raise TransportError("disconnected") from None
            # A pooled connection the node closed just as we reused it (its
            # keep-alive timer against ours): nothing was answered and the call
            # is a read, so it goes once more on a new connection, as Go's
            # http.Transport does, rather than count the node failed.
            conn = await self._connect(target)
            try:
                return await self._exchange(host, conn, request)
            except Stale:
                raise TransportError("disconnected") from None

    async def _exchange(self, host: _Host, conn: Conn, request: bytes) -> Answer:
        done = False
        try:
            answer = await conn.send(request, self.max_response_bytes)
            done = True
        finally:
            self._finish(host, conn, done)
        return answer

    def _finish(self, host: _Host, conn: Conn, done: bool) -> None:
        # Only a whole answer frees the connection for another call; a
        # cancelled or failed one may still have bytes on the way.
        if done and conn.keep_alive and conn.usable and not self._closed:
            conn.reused = True
            conn.idle_since = self._clock()
            host.idle.append(conn)
            self._arm_sweep()
        else:
            conn.close()

    def _idle(self, host: _Host) -> Conn | None:
        now = self._clock()
        while host.idle:
            conn = host.idle.pop()
            assert conn.transport is not None
            if conn.usable and not conn.transport.is_closing():
                if now - conn.idle_since < self._keepalive_s:
                    return conn
            conn.close(abort=False)
        return None

    async def _connect(self, target: _Target) -> Conn:
        tls, name = None, None
        if target.tls:
            tls, name = self._ssl or ssl.create_default_context(), target.host
            self._ssl = tls  # built once: loading the system's CAs takes milliseconds
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
            # aiohttp's happy eyeballs: a silent IPv6 address, then IPv4 250 ms
            # later (asyncio's own, 3.12.1, asserts when an address refuses)
            sock = await aiohappyeyeballs.start_connection(infos, happy_eyeballs_delay=0.25)
            _, conn = await loop.create_connection(Conn, sock=sock, ssl=tls, server_hostname=name)
        except OSError:  # refused, unreachable, DNS, TLS handshake or certificate
            raise TransportError("connect-error") from None
        return conn

    def _arm_sweep(self) -> None:
        if self._sweep is None:
            self._sweep = asyncio.get_running_loop().call_later(self._keepalive_s, self._expire)

    def _expire(self) -> None:
        """Close connections idle for ``keepalive_s``, before the node does."""
        self._sweep = None
        now = self._clock()
        for host in self._hosts.values():
            for c in host.idle:
                if now - c.idle_since >= self._keepalive_s:
                    c.close(abort=False)
            host.idle = [c for c in host.idle if c.usable]
        if any(h.idle for h in self._hosts.values()):
            self._arm_sweep()

    def idle_connections(self) -> int:
        return sum(len(h.idle) for h in self._hosts.values())

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Close the idle connections; one in use closes when its call ends.
        Calls still work, unpooled: a flow that began before a reload may
        still fail over through this client after the new runtime let it go."""
        self._closed = True
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for host in self._hosts.values():
            for conn in host.idle:
                conn.close(abort=False)
            host.idle.clear()


def _decode(raw: bytes, encoding: bytes, limit: int) -> bytes:
    """The body decoded, at most ``limit`` bytes of it (a small gzip may inflate to GBs)."""
    if encoding == b"deflate":  # zlib-wrapped as the RFC says, or raw as some servers send
        wbits = zlib.MAX_WBITS if raw[0] & 0x0F == 8 else -zlib.MAX_WBITS
    else:
        wbits = 16 + zlib.MAX_WBITS
    d = zlib.decompressobj(wbits)
    try:
        out = d.decompress(raw, limit + 1)
    except zlib.error:
        raise TransportError("truncated-body") from None
    if len(out) > limit or d.unconsumed_tail:
        raise TransportError("response-too-large")
    if not d.eof:
        raise TransportError("truncated-body")
    return out
