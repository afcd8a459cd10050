"""Client WebSocket keep-alive: each client socket is sent a ping every
``proxy.websocket.ping_interval_s``, and a client that has not answered one
(its pong) within ``ping_timeout_s`` is closed with 1011, its socket slot and
subscriptions freed (``WebSocketRpc``). A client that went away without a
close (a laptop shut, a NAT that forgot the flow, a process stopped) would
otherwise hold its slot and its subscriptions until the kernel gives up on
the connection, hours later, and the proxy would keep fanning notifications
into a socket nobody reads.

Why 1011 ("unexpected condition"), not 1001 ("going away"): 1001 is what the
proxy says when it is itself going away (a drain), and a client that
reconnects at once is right to. 1011 says the connection was judged broken;
it is also what the ``websockets`` library's own keep-alive closes with.

How the ping goes out and the pong comes back depends on who reads the
socket. On a plain-text socket with direct writes the ping frame is written
straight to it (``ClientConn.ping``), and the pong is read by the direct reads
(``addon/mitm/ws_reads.py``: ``on_pong``). Otherwise (TLS, ``chainproxy_ws_direct``
off, or reads handed back to mitmproxy) the sink pings its side of the
socket: mitmproxy relays the ping to the client and the client's pong back to
the sink, which reports it (``addon/sockets/sink.py``). Either way any pong
counts (RFC 6455 allows a client to answer only the latest ping, or to send
pongs unasked): at most one ping is outstanding at a time.

``Keepalive`` is one socket's state (pure, times passed in); ``Pinger`` the
process's one loop over its open sockets.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal, Protocol

log = logging.getLogger("chainproxy")

CLOSE_CODE = 1011  # the client stopped answering pings (see above)
CLOSE_REASON = "ping timeout"

Due = Literal["ping", "dead"] | None


@dataclass(slots=True)
class Keepalive:
    """One socket's pings: when the last went out, whether it is answered."""

    last: float  # the open, or the last ping sent
    sent_at: float | None = None  # the ping not answered yet
    sent: int = 0

    def tick(
        self, now: float, interval_s: float, timeout_s: float
    ) -> Literal["ping", "dead"] | None:
        """What is due now: a ping, the close (a ping unanswered for
        ``timeout_s``), or nothing. ``interval_s`` 0: no pings at all."""
        if self.sent_at is not None:
            return "dead" if now - self.sent_at >= timeout_s else None
        if interval_s > 0 and now - self.last >= interval_s:
            return "ping"
        return None

    def pinged(self, now: float) -> bytes:
        """A ping goes out now: its payload (a counter, as short as can be)."""
        self.sent_at = self.last = now
        self.sent += 1
        return str(self.sent).encode()

    def ponged(self) -> None:
        """A pong came: the client is there."""
        self.sent_at = None


class Pinged(Protocol):
    """What the loop needs of a client socket (``ClientConn``)."""

    keepalive: Keepalive

    @property
    def open(self) -> bool: ...


class Pinger:
    """The process's keep-alive loop over its open client sockets. ``ping``
    sends one (the caller picks the way), ``dead`` closes a socket that stopped
    answering; ``settings`` gives ``(interval_s, timeout_s)`` as configured now."""

    def __init__(
        self,
        conns: Callable[[], Iterable[Pinged]],
        settings: Callable[[], tuple[float, float]],
        ping: Callable[[Pinged, bytes], None],
        dead: Callable[[Pinged], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.conns, self.settings, self.clock = conns, settings, clock
        self._ping, self._dead = ping, dead
        self._task: asyncio.Task[None] | None = None

    def tick(self) -> None:
        """One round: pings due go out, sockets silent past the timeout close."""
        interval, timeout = self.settings()
        now = self.clock()
        for conn in list(self.conns()):
            if not conn.open:
                continue
            due = conn.keepalive.tick(now, interval, timeout)
            if due == "ping":
                self._ping(conn, conn.keepalive.pinged(now))
            elif due == "dead":
                self._dead(conn)

    def period(self) -> float:
        """How often a round runs: a quarter of the shorter setting (0.05..5 s)."""
        interval, timeout = self.settings()
        shortest = min(interval, timeout) if interval > 0 else timeout
        return max(0.05, min(5.0, shortest / 4))

    def start(self) -> None:
        """The loop, once (the first socket's handshake starts it)."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.period())
            try:
                self.tick()
            except Exception:  # one socket's trouble must not end the pings of all
                log.exception("WebSocket keep-alive round failed; the next one runs")

    def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
