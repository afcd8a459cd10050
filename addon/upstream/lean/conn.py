"""One keep-alive HTTP/1.1 connection to a node (``Conn``, an
``asyncio.Protocol`` whose answers ``httptools`` parses) and the places that
bound how many are in use (``Slots``): the parts of ``client``'s
``LeanTransport`` below its pool."""

from __future__ import annotations

import asyncio
from collections import deque
from contextlib import suppress

import httptools

from addon.upstream.forward import TransportError

HEAD_LIMIT = 65536  # bytes of an answer's status line and headers
# aiohttp's reason for an answer that is not HTTP: metrics read the same either way
BAD_ANSWER = "client-error:ClientResponseError"


# status, body (still encoded), Content-Encoding, Retry-After
Answer = tuple[int, bytes, bytes, str | None]


class Stale(Exception):
    """The connection closed before any byte of the answer arrived."""


class Conn(asyncio.Protocol):
    """One keep-alive connection, one request at a time."""

    __slots__ = (
        "answered", "body", "encoding", "head", "idle_since", "keep_alive", "length", "limit",
        "parser", "retry_after", "reused", "size", "sized", "status", "transport", "usable",
        "waiter",
    )  # fmt: skip

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[Answer] | None = None
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

    def send(self, data: bytes, limit: int) -> asyncio.Future[Answer]:
        assert self.transport is not None
        self._reset()
        self.limit = limit
        self.waiter = asyncio.get_running_loop().create_future()
        if not self.usable or self.transport.is_closing():
            # lost between connect and now: a write would vanish and the call
            # wait for its timeout; nothing was answered
            self._fail(Stale())
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
            self._fail(Stale())
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


class Slots:
    """A counting semaphore, fair as asyncio's, whose free place can also be
    taken without a coroutine (``try_take``): the common call, an idle
    connection and room at once, then awaits nothing but its answer."""

    __slots__ = ("_waiters", "free")

    def __init__(self, places: int) -> None:
        self.free = places
        self._waiters: deque[asyncio.Future[None]] = deque()

    def try_take(self) -> bool:
        if self.free > 0 and not self._waiters:  # nobody waiting goes before
            self.free -= 1
            return True
        return False

    async def take(self) -> None:
        if self.try_take():
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # a release hands its place over: ``free`` is not raised
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a place just as it was cancelled: pass it on
            else:
                with suppress(ValueError):
                    self._waiters.remove(waiter)
            raise

    async def __aenter__(self) -> None:
        await self.take()

    async def __aexit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.free += 1


def time_out(answer: asyncio.Future[Answer]) -> None:
    if not answer.done():
        answer.set_exception(TimeoutError())
