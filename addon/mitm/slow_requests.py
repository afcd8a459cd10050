"""Slow requests (slow-loris): mitmproxy's only clock is ``tcp_timeout``
(600 s of *silence*), so a client sending one byte a second holds its
connection for ever. A request (head and body) must arrive within
``read_timeout_s`` of its first byte, else a JSON-RPC 408 and the connection
is closed (``addon/mitm/limits.py`` times each request it sees incomplete,
``addon/mitm/http_reads.py`` hands over the start of one it read). Idle
keep-alive connections are not affected (no request begun)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from mitmproxy import ctx
from mitmproxy.proxy.layers.http import _http1

from addon.mitm.responses import json_error

log = logging.getLogger("chainproxy")

_READ_BODY = _http1.Http1Connection.read_body  # mitmproxy's own


class ReadTimeout(Protocol):
    read_timeout_s: float


class SlowRequests:
    """Requests being received, by their layer; a sweep (only while there are
    any) closes those older than ``limits.read_timeout_s`` with a 408."""

    def __init__(self, limits: ReadTimeout, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.clock = clock
        self.head_reader: Any = None  # the installed ``Http1Server.read_headers``
        self.body_reader: Any = None  # ... and ``read_body``
        self._open: dict[int, tuple[weakref.ref[Any], int, float]] = {}
        self._timer: asyncio.TimerHandle | None = None
        # a layer -> when the request handed to it began (``began``)
        self._began: dict[int, float] = {}

    def __len__(self) -> int:
        return len(self._open)

    @contextlib.contextmanager
    def began(self, layer: Any, started: float) -> Iterator[None]:
        """Bytes of a request whose first byte came at ``started`` (chainproxy's
        direct reads read them, then hand them back) go to ``layer`` inside
        this block: if the request is still incomplete, it is timed from
        ``started``, not from now (else a hand-back would double its time)."""
        self._began[id(layer)] = started
        try:
            yield
        finally:
            self._began.pop(id(layer), None)

    def track(self, layer: Any) -> None:
        entry, stream_id = self._open.get(id(layer)), layer.stream_id
        if entry is not None and entry[0]() is layer and entry[1] == stream_id:
            return  # timed since this request's first byte
        started = self._began.pop(id(layer), None)
        if started is None:
            started = self.clock()
        self._open[id(layer)] = (weakref.ref(layer), stream_id, started)
        if self._timer is None:
            self._schedule()

    def forget(self, layer: Any) -> None:
        self._open.pop(id(layer), None)

    def _schedule(self) -> None:
        period = min(1.0, max(0.05, self.limits.read_timeout_s / 4))
        try:
            self._timer = asyncio.get_running_loop().call_later(period, self.sweep)
        except RuntimeError:
            self._open.clear()  # no loop (a layer driven by hand, in a test): nothing to time

    def _receiving(self, layer: Any, stream_id: int) -> bool:
        """Still reading the request it was timed for."""
        state = getattr(layer.state, "__func__", None)
        if layer.stream_id != stream_id:
            return False
        if state is None:
            return False
        if state is _READ_BODY or state is self.body_reader:
            return True
        return state is self.head_reader and bool(layer.buf)

    def sweep(self) -> None:
        self._timer = None
        now, limit = self.clock(), self.limits.read_timeout_s
        for key, (ref, stream_id, started) in list(self._open.items()):
            layer = ref()
            if layer is None or not self._receiving(layer, stream_id):
                del self._open[key]
            elif now - started >= limit:
                del self._open[key]
                _close_slow(layer, limit)
        if self._open:
            self._schedule()


def _close_slow(layer: Any, limit: float) -> None:
    """What mitmproxy's own inactivity timeout does (cancel the client's reader,
    which closes the socket), after a 408 the client can read."""
    try:
        handler = ctx.master.addons.get("proxyserver").connections.get(layer.conn.id)
        io = handler.transports.get(layer.conn) if handler is not None else None
    except AttributeError:
        return
    if io is None or io.handler is None or io.writer is None:
        return  # closing already
    if not io.writer.is_closing():
        with contextlib.suppress(OSError, RuntimeError):
            late = f"request not received within {limit:g} s"
            io.writer.write(json_error(408, late, {"timeout_s": limit}))
    log.info("chainproxy: request from %s incomplete after %g s", layer.conn.peername, limit)
    io.handler.cancel("chainproxy: request read timeout")
