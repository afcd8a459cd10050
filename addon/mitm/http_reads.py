"""Direct reads of a kept-alive HTTP/1.1 client: the sixth use of mitmproxy's
internals, under the same version guard as the others (``internals.py``).

Why: a cache hit over HTTP cost ~650 µs of proxy CPU, ~550 of them
mitmproxy's path for each request (a ``DataReceived`` through the layer stack,
h11's parser, an ``HTTPFlow``, four hooks dispatched to every addon, the
response assembled and sent through the layers: docs/BENCHMARKS.md). The
WebSocket path reads its frames itself (``ws_reads.py``); this is the same
for HTTP.

How: once chainproxy has answered a call on a plain-text HTTP/1.1 keep-alive
connection (``take``, from the ``response`` hook), the client's
``ConnectionHandler`` gets, on that one instance, a ``server_event`` that
passes everything to mitmproxy's own except the client's bytes, which go to a
``RequestReader`` (``http_requests.py``). The reads are taken over only when
mitmproxy's HTTP/1 server layer sits at a request boundary (waiting for a
head, nothing buffered, no stream open, no layer holding events back). Each
whole plain POST goes to ``on_request``: it writes the answer itself and
returns None (answered), an awaitable (awaited before the next request is
read: pipelined requests are answered in order) or ``HAND_BACK``. At the
first request that is unusual (``http_requests.py``) or handed back (another
path, a drain), every byte from that request's first on goes back to
mitmproxy for good, which answers it and the rest as it always has.

The bounds hold as on mitmproxy's path: a request must arrive within
``read_timeout_s`` of its first byte (else the same JSON 408, then the
connection is closed as ``limits.py`` closes it); a longer head, a longer or
chunked body, ``Expect``, ``Connection: close``, HTTP/1.0 are handed back, so
mitmproxy answers them (its 431, JSON 413, 100 Continue, ...). mitmproxy's
inactivity clock is kept going, as its own ``server_event`` would. Requests
answered here are not flows: mitmweb shows none (``chainproxy_http_direct``
is off under ``make inspect``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from mitmproxy import http
from mitmproxy.proxy import events
from mitmproxy.proxy.layers.http import HttpLayer
from mitmproxy.proxy.layers.http._http1 import Http1Connection, Http1Server

from addon.mitm import internals as mitm_internals
from addon.mitm.http_requests import UNUSUAL, Request, RequestReader
from addon.mitm.internals import handler_assumptions
from addon.mitm.limits import Limits
from addon.mitm.responses import json_error
from addon.mitm.slow_requests import SlowRequests

log = logging.getLogger("chainproxy")


class _HandBack:
    __slots__ = ()


HAND_BACK: Final = _HandBack()

OnRequest = Callable[["DirectHttpReads", Request], "Awaitable[None] | _HandBack | None"]


class DirectHttpReads:
    """One connection's reads, from ``take`` until a hand-back or its end."""

    def __init__(
        self,
        handler: Any,
        path: list[Any],
        writer: Any,
        on_request: OnRequest,
        limits: Limits,
        max_body: int,
        on_busy: Callable[[bool], None] = lambda busy: None,
        clock: Callable[[], float] = time.monotonic,
        slow: SlowRequests | None = None,
    ) -> None:
        self.handler = handler
        self.path = path  # the layers down to the client's HTTP/1 server layer
        self.client = handler.client
        self.writer = writer
        self.on_request = on_request
        self.on_busy = on_busy  # True: a request began (idle clock off); False: none left
        self.slow = slow  # mitmproxy's path's slow-request clock (a hand-back keeps its start)
        self.limits = limits
        self.clock = clock
        self.reader = RequestReader(max_body)
        self.ready = False  # mitmproxy's layer was once at a request boundary
        self.released = False
        self.requests = 0  # answered here (tests, metrics)
        self.busy = False
        self.started = 0.0  # the first byte of the request being received
        self._timer: asyncio.TimerHandle | None = None
        self._original = handler.server_event  # mitmproxy's own, bound to the handler

    @property
    def live(self) -> bool:
        """The client is still there (the pipeline's ``Origin``)."""
        return not self.writer.is_closing()

    def install(self) -> None:
        self.handler.server_event = self.server_event

    def write(self, data: bytes) -> None:
        if not self.writer.is_closing():
            self.writer.write(data)

    def _restore(self) -> None:
        if vars(self.handler).get("server_event") == self.server_event:
            del self.handler.server_event  # mitmproxy's method again

    def _busy(self, busy: bool) -> None:
        if busy != self.busy:
            self.busy = busy
            self.on_busy(busy)

    async def server_event(self, event: events.Event) -> None:
        if type(event) is not events.DataReceived or event.connection is not self.client:
            if type(event) is events.ConnectionClosed and event.connection is self.client:
                self._disarm()
            return await self._original(event)
        if self.released:  # only after a hand-back that could not restore (never, today)
            return await self._original(event)
        if not self.ready:
            if not at_request_boundary(self.path):
                return await self._original(event)  # mitmproxy is mid-request: its read
            self.ready = True
        self.handler.timeout_watchdog.register_activity()
        reader = self.reader
        if not reader.buf and event.data:
            self.started = self.clock()
            self._busy(True)
        reader.feed(event.data)
        self._disarm()
        while reader.buf:
            request = reader.peek()
            if request is None:
                break
            if request is UNUSUAL:
                return await self._hand_back()
            assert isinstance(request, Request)
            verdict = self.on_request(self, request)
            if verdict is HAND_BACK:
                return await self._hand_back()
            reader.consume(request)
            self.requests += 1
            if verdict is not None:
                assert not isinstance(verdict, _HandBack)
                await verdict  # in order: the next request waits for this answer
            if reader.buf:
                self.started = self.clock()  # the next one (pipelined) starts now
        if reader.buf:
            self._arm()
        else:
            self._busy(False)
        return None

    async def _hand_back(self) -> None:
        """Every byte not taken, to mitmproxy, and its reads with them, for good.
        A request begun here is timed on mitmproxy's path from its first byte."""
        rest = bytes(self.reader.buf)
        self.reader.buf.clear()
        self._disarm()
        self._busy(False)  # mitmproxy's hooks count what comes next
        self.released = True
        self._restore()
        if not rest:
            return
        event = events.DataReceived(self.client, rest)
        if self.slow is None:
            await self._original(event)
            return
        with self.slow.began(self.path[-1], self.started):
            await self._original(event)

    def close(self) -> None:
        """After an answer that said ``Connection: close`` (a drain): nothing
        more is read; the socket closes once the answer is written."""
        self.reader.buf.clear()
        self._disarm()
        self._busy(False)
        self._cut("chainproxy: Connection: close")

    def _cut(self, reason: str) -> None:
        """Cancel the client's reader, which closes the socket (mitmproxy's way)."""
        io = self.handler.transports.get(self.client)
        if io is not None and io.handler is not None:
            io.handler.cancel(reason)

    # --- the slow-request deadline (as limits.SlowRequests, for this one connection)

    def _arm(self) -> None:
        limit = self.limits.read_timeout_s
        delay = max(0.0, self.started + limit - self.clock())
        with contextlib.suppress(RuntimeError):
            self._timer = asyncio.get_running_loop().call_later(delay, self._expire)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        """A request still incomplete ``read_timeout_s`` after its first byte:
        the JSON 408, then the client's reader cancelled (it closes the socket),
        as ``limits.py`` does on mitmproxy's path."""
        self._timer = None
        limit = self.limits.read_timeout_s
        self.write(
            json_error(408, f"request not received within {limit:g} s", {"timeout_s": limit})
        )
        log.info("chainproxy: request from %s incomplete after %g s", self.client.peername, limit)
        self._cut("chainproxy: request read timeout")


def take(
    master: Any,
    flow: http.HTTPFlow,
    on_request: OnRequest,
    limits: Limits,
    max_body: int,
    on_busy: Callable[[bool], None] = lambda busy: None,
    slow: SlowRequests | None = None,
) -> DirectHttpReads | None:
    """The client's reads of ``flow``'s connection taken over (from its next
    request boundary on), or None where that is not safe (an untested
    mitmproxy, a TLS client, no handler or HTTP/1 server layer)."""
    found = mitm_internals.plain_client(master, flow)
    if found is None:
        return None
    handler, writer = found
    if "server_event" in vars(handler):
        return None  # taken already (or another mechanism's)
    path = find_server(handler)
    if path is None:
        log.debug("chainproxy: no direct HTTP reads (no HTTP/1 server layer found)")
        return None
    reads = DirectHttpReads(handler, path, writer, on_request, limits, max_body, on_busy, slow=slow)
    reads.install()
    return reads


def find_server(handler: Any) -> list[Any] | None:
    """The layers from the handler's root down to the client's HTTP/1 server
    layer (next layers, the mode's child, the HTTP layer's connections)."""
    todo: list[tuple[Any, list[Any]]] = [(getattr(handler, "layer", None), [])]
    for _ in range(64):  # a handful of levels deep; bounded whatever happens
        if not todo:
            return None
        layer, above = todo.pop()
        if layer is None:
            continue
        path = [*above, layer]
        if isinstance(layer, Http1Server):
            return path if layer.conn is handler.client else None
        todo.append((getattr(layer, "layer", None), path))
        todo.append((getattr(layer, "child_layer", None), path))
        if isinstance(layer, HttpLayer):
            todo.extend((c, path) for c in layer.connections.values())
    return None


def at_request_boundary(path: list[Any]) -> bool:
    """mitmproxy's side of the client's connection waits for a request head
    with nothing of one in hand, no stream open, and no layer on the way to it
    holding events back (none waits for a hook): a read taken here is whole to
    us."""
    server = path[-1]
    try:
        http_layers = [lay for lay in path if isinstance(lay, HttpLayer)]
        return (
            getattr(server.state, "__name__", "") == "read_headers"
            and not server.buf
            and server.request is None
            and not server.request_done
            and not server.response_done
            and len(http_layers) == 1
            and not http_layers[0].streams
            and all(lay._paused is None and not lay._paused_event_queue for lay in path)
        )
    except AttributeError:
        return False


def assumptions() -> list[tuple[str, bool]]:
    """What the direct reads rely on, by name (tests/addon/mitm checks them)."""
    return [
        *handler_assumptions(),
        ("Http1Server.read_headers", callable(getattr(Http1Server, "read_headers", None))),
        ("Http1Connection.buf", "buf" in Http1Connection.__annotations__),
        ("HttpLayer.streams", "streams" in HttpLayer.__annotations__),
        ("HttpLayer.connections", "connections" in HttpLayer.__annotations__),
    ]
