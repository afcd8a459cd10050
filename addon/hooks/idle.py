"""Idle client connections are closed after twice ``proxy.read_timeout_s``.

mitmproxy's only clock for a connection is ``tcp_timeout`` (600 s of
silence): a client that opens connections and sends nothing (or holds
kept-alive connections it never uses) keeps a file descriptor each for ten
minutes, so a few thousand of them exhaust the proxy's. ``ReadLimits``
(``limits.py``) times a request once its first byte came; this addon times
what comes before: a connection with no request in flight for
twice ``read_timeout_s`` (a fresh one that never sent one, or a kept-alive
one between requests) is closed, as nginx's ``keepalive_timeout`` does. Twice,
because a request whose head is still arriving is not seen here (mitmproxy
tells addons of a request once its head is whole): it has ``read_timeout_s``
from its first byte, then ``ReadLimits`` answers 408, and that answer must
come first. HTTP/1 and
HTTP/2 alike (a request in flight on any HTTP/2 stream keeps it open);
WebSocket connections are never closed for being quiet (subscribers mostly
listen).
"""

from __future__ import annotations

import asyncio
import logging

from mitmproxy import connection, ctx, http

from addon.hooks.holder import RuntimeHolder
from addon.mitm import internals as mitm_internals

log = logging.getLogger("chainproxy")


class IdleConnections:
    def __init__(self, holder: RuntimeHolder) -> None:
        self.holder = holder
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._inflight: dict[str, int] = {}  # connection id -> requests in flight
        self._sockets: set[str] = set()  # connections upgraded to WebSocket
        self.closed = 0

    def _timeout(self) -> float | None:
        rt = self.holder.runtime
        return 2 * rt.config.proxy.read_timeout_s if rt is not None else None

    def _arm(self, conn_id: str) -> None:
        self._disarm(conn_id)
        timeout = self._timeout()
        if timeout is None or timeout <= 0 or conn_id in self._sockets:
            return
        loop = asyncio.get_running_loop()
        self._timers[conn_id] = loop.call_later(timeout, self._expire, conn_id)

    def _disarm(self, conn_id: str) -> None:
        timer = self._timers.pop(conn_id, None)
        if timer is not None:
            timer.cancel()

    def _expire(self, conn_id: str) -> None:
        self._timers.pop(conn_id, None)
        if self._inflight.get(conn_id) or conn_id in self._sockets:
            return
        if mitm_internals.close_client(ctx.master, conn_id):
            self.closed += 1

    # --- mitmproxy hooks ---------------------------------------------------------------

    def client_connected(self, client: connection.Client) -> None:
        self._arm(client.id)

    def client_disconnected(self, client: connection.Client) -> None:
        self._disarm(client.id)
        self._inflight.pop(client.id, None)
        self._sockets.discard(client.id)

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        self._started(flow.client_conn.id)

    def busy(self, cid: str, busy: bool) -> None:
        """A request read by chainproxy itself (``hooks/http_direct.py``) began
        (from its first byte: its deadline is the direct reads' own) or ended."""
        if busy:
            self._started(cid)
        else:
            self._stopped(cid)

    def _started(self, cid: str) -> None:
        self._inflight[cid] = self._inflight.get(cid, 0) + 1
        self._disarm(cid)

    def _ended(self, flow: http.HTTPFlow) -> None:
        self._stopped(flow.client_conn.id)

    def _stopped(self, cid: str) -> None:
        left = max(0, self._inflight.get(cid, 0) - 1)
        self._inflight[cid] = left
        if left == 0:
            self._arm(cid)

    def websocket_start(self, flow: http.HTTPFlow) -> None:
        self._sockets.add(flow.client_conn.id)  # a quiet subscriber is not idle
        self._disarm(flow.client_conn.id)

    def response(self, flow: http.HTTPFlow) -> None:
        if flow.websocket is None:
            self._ended(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self._ended(flow)

    def done(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
