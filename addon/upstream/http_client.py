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
import httptools

from addon.upstream.backoff import parse_retry_after
from addon.upstream.forward import TransportError

KEEPALIVE_S = 4.0  # node servers (Node, chopsticks) drop idle connections at 5 s
LIMIT_PER_HOST = 256
LIMIT = 1024
MAX_TARGETS = 4096  # URLs parsed and kept (they come from the config: a handful)
HEAD_LIMIT = 65536  # bytes of an answer's status line and headers
# aiohttp's reason for an answer that is not HTTP: metrics read the same either way
BAD_ANSWER = "client-error:ClientResponseError"
_USER_AGENT = b"chainproxy"  # some providers' gateways refuse a request without one


# status, body (still encoded), Content-Encoding, Retry-After
_Answer = tuple[int, bytes, bytes, str | None]


class _Stale(Exception):
    """The connection closed before any byte of the answer arrived."""


class _Conn(asyncio.Protocol):
    """One keep-alive connection, one request at a time."""

    __slots__ = (
        "answered", "body", "encoding", "head", "idle_since", "keep_alive", "length", "limit",
        "parser", "retry_after", "reused", "size", "sized", "status", "transport", "usable",
        "waiter",
    )  # fmt: skip

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[_Answer] | None = None
        self.usable = True  # False: never pooled again
        self.reused = False  # it answered a call before this one
        self.idle_since = 0.0
        self.limit = 0
        self._reset()

    def _reset(self) -> None:
        self.answered = False  # a byte of this call's answer arrived
        self.head = 0  # bytes read while its head is not complete
        self.status = 0
        self.body: list[bytes] = []
        self.size = 0
        self.sized = False  # Content-Length or chunked: the end is known without EOF
        self.length = 0
        self.encoding = b""
        self.retry_after: str | None = None
        self.keep_alive = False

    def send(self, data: bytes, limit: int) -> asyncio.Future[_Answer]:
        assert self.transport is not None
        self._reset()
        self.limit = limit
        self.waiter = asyncio.get_running_loop().create_future()
        if not self.usable or self.transport.is_closing():
            # lost between connect and now: a write would vanish and the call
            # wait for its timeout; nothing was answered
            self._fail(_Stale())
        else:
            self.transport.write(data)
        return self.waiter

    def close(self, abort: bool = True) -> None:
        """``abort``: at once (an answer half read is never read); else a FIN."""
        self.usable = False
        if self.transport is not None:
            self.transport.abort() if abort else self.transport.close()

    def _fail(self, exc: BaseException) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.close()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # TCP: a Transport

    def data_received(self, data: bytes) -> None:
        if self.waiter is None:  # nothing asked: a stray byte (a 408, garbage)
            self.close()
            return
        self.answered = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self._fail(TransportError(BAD_ANSWER))
            return
        if not self.status and self.waiter is not None:
            # a head that never ends (a hostile or broken node): llhttp keeps a
            # header value growing, so it is bounded as a client's head is
            self.head += len(data)
            if self.head > HEAD_LIMIT:
                self._fail(TransportError("response-head-too-large"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.usable = False
        if self.waiter is None:
            return
        if not self.answered:
            self._fail(_Stale())
        elif self.status >= 200 and not self.sized:
            self._done()  # the body ran until the node closed: complete
        elif self.status:
            self._fail(TransportError("truncated-body"))
        else:  # cut inside the status line or headers
            self._fail(TransportError("disconnected"))

    # httptools' callbacks
    def on_message_begin(self) -> None:
        if self.waiter is None:  # bytes after the answer: the stream is not ours to reuse
            self.usable = False

    def on_header(self, name: bytes, value: bytes) -> None:
        n = name.lower()
        if n == b"content-length":
            self.sized = True
            self.length = int(value)  # llhttp has checked it is a number
        elif n == b"transfer-encoding" and b"chunked" in value.lower():
            self.sized = True
        elif n == b"content-encoding":
            self.encoding = value.strip().lower()
        elif n == b"retry-after":
            self.retry_after = value.decode("latin1")

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        if self.length > self.limit and self.status >= 200:  # refused before it is read
            self._fail(TransportError("response-too-large"))

    def on_body(self, chunk: bytes) -> None:
        if self.waiter is None:  # failed already: the rest of this read is dropped
            return
        self.size += len(chunk)
        if self.size > self.limit:
            self._fail(TransportError("response-too-large"))
            return
        self.body.append(chunk)

    def on_message_complete(self) -> None:
        if self.status < 200:  # 1xx (100 Continue, 103 Early Hints): the answer follows
            self.status = 0
            return
        self.keep_alive = self.parser.should_keep_alive()
        self._done()

    def _done(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            body = self.body[0] if len(self.body) == 1 else b"".join(self.body)
            waiter.set_result((self.status, body, self.encoding, self.retry_after))


class _Host:
    __slots__ = ("idle", "slots")

    def __init__(self) -> None:
        self.idle: list[_Conn] = []  # most recently used last (LIFO: cold ones expire)
        self.slots = asyncio.Semaphore(LIMIT_PER_HOST)


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
        self._slots = asyncio.Semaphore(LIMIT)
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

    async def _call(self, target: _Target, request: bytes) -> _Answer:
        host = self._hosts.get(target.key) or self._hosts.setdefault(target.key, _Host())
        async with self._slots, host.slots:
            conn = self._idle(host) or await self._connect(target)
            try:
                return await self._exchange(host, conn, request)
            except _Stale:
                if not conn.reused:  # a fresh connection cut: the node's doing
                    raise TransportError("disconnected") from None
            # A pooled connection the node closed just as we reused it (its
            # keep-alive timer against ours): nothing was answered and the call
            # is a read, so it goes once more on a new connection, as Go's
            # http.Transport does, rather than count the node failed.
            conn = await self._connect(target)
            try:
                return await self._exchange(host, conn, request)
            except _Stale:
                raise TransportError("disconnected") from None

    async def _exchange(self, host: _Host, conn: _Conn, request: bytes) -> _Answer:
        done = False
        try:
            answer = await conn.send(request, self.max_response_bytes)
            done = True
        finally:
            # Only a whole answer frees the connection for another call; a
            # cancelled or failed one may still have bytes on the way.
            if done and conn.keep_alive and conn.usable and not self._closed:
                conn.reused = True
                conn.idle_since = self._clock()
                host.idle.append(conn)
                self._arm_sweep()
            else:
                conn.close()
        return answer

    def _idle(self, host: _Host) -> _Conn | None:
        now = self._clock()
        while host.idle:
            conn = host.idle.pop()
            assert conn.transport is not None
            if conn.usable and not conn.transport.is_closing():
                if now - conn.idle_since < self._keepalive_s:
                    return conn
            conn.close(abort=False)
        return None

    async def _connect(self, target: _Target) -> _Conn:
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
            _, conn = await loop.create_connection(_Conn, sock=sock, ssl=tls, server_hostname=name)
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
