"""One client's WebSocket: its calls in flight, its subscriptions, and the
way notifications reach it, with a bound on what a client that does not read
may leave queued."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from mitmproxy import http

from addon.mitm import internals as mitm_internals
from addon.mitm.frames import ping_frame
from addon.sockets.keepalive import Keepalive

log = logging.getLogger("chainproxy")

MAX_IN_FLIGHT = 64  # unanswered calls per connection before we stop reading it
SLOW_CLIENT_CLOSE = 1008  # policy violation: the client does not read its notifications


class ClientConn:
    def __init__(
        self,
        flow: http.HTTPFlow,
        network: str,
        client: str,
        *,
        tier: str | None = None,
        address: str = "",
        master: Any,
        max_queued: int,
        max_buffer_bytes: int,
        on_slow: Callable[[ClientConn], None],
        direct: bool = True,
    ) -> None:
        self.flow = flow
        self.network = network
        self.client = client  # quota identity, as for its POSTs
        self.tier = tier  # its tier (None: the default quota)
        self.address = address  # where it came from (the access log)
        self.slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        self.tasks: set[asyncio.Task[None]] = set()
        self.calls = 0
        self.subscriptions: dict[str, str] = {}  # client subscription id -> method as called
        self.injected = 0  # messages handed to mitmproxy for the client ...
        self.relayed = 0  # ... and those mitmproxy has passed on since
        self.closing = False
        self._master = master
        self._max_queued = max_queued
        self._max_buffer = max_buffer_bytes
        self._on_slow = on_slow
        # Frames straight to the client's socket where that is safe (plain-text
        # sockets, a known mitmproxy); else mitmproxy's inject (what mitmweb shows).
        self._write = mitm_internals.client_writer(master, flow) if direct else None
        self._out: list[bytes] = []
        # the sizes of the messages still (partly) in the socket's buffer,
        # oldest first, while it holds any: a direct socket's unread messages
        self._held: deque[int] = deque()
        self._held_bytes = 0
        self.reads: Any = None  # addon/mitm/ws_reads.DirectReads, once its reads are taken over
        self.keepalive = Keepalive(time.monotonic())  # its pings (addon/sockets/keepalive.py)

    @property
    def direct(self) -> bool:
        """Answers go straight to the socket (so may its messages come from it)."""
        return self._write is not None

    @property
    def open(self) -> bool:
        ws = self.flow.websocket
        return not self.closing and ws is not None and ws.timestamp_end is None

    @property
    def live(self) -> bool:
        """Whether answering a call of this socket is still of use (``Origin``)."""
        return self.open

    def send(self, body: bytes) -> None:
        """One message towards the client; a client that lets too much pile up
        is closed (1008) instead of growing the proxy's memory."""
        if not self.open:
            return
        if self._write is not None:
            # Gathered and written once per loop turn: a head fanned out to many
            # subscriptions of one socket is one write, not one per subscription.
            self._out.append(body)
            if len(self._out) == 1:
                asyncio.get_running_loop().call_soon(self._flush)
            return
        if self.injected - self.relayed > self._max_queued or self._buffered() > self._max_buffer:
            self._too_slow(self.injected - self.relayed)
            return
        self.injected += 1
        self._master.commands.call("inject.websocket", self.flow, True, body, True)

    def ping(self, payload: bytes) -> bool:
        """A ping written straight to the client's socket (a direct one); False
        where it is not (the sink pings it through mitmproxy instead)."""
        if self._write is None or not self.open:
            return False
        stream = mitm_internals.client_stream(self._master, self.flow, quiet=True)
        if stream is None:
            return False
        stream[0].write(ping_frame(payload))
        mitm_internals.client_activity(self._master, self.flow)()  # as the sink's ping would
        return True

    def ponged(self) -> None:
        """The client answered a ping (read directly, or relayed to the sink)."""
        self.keepalive.ponged()

    def _flush(self) -> None:
        out, self._out = self._out, []
        if not (out and self.open and self._write is not None):
            return
        buffered = self._write(out)
        held = self._held
        if not buffered:  # all of it handed to the kernel (the usual case)
            if held:
                held.clear()
                self._held_bytes = 0
            return
        # The buffer is first in, first out: the messages it still holds are
        # the newest whose bytes add up to ``buffered`` (frame headers counted).
        for m in out:
            n = len(mitm_internals.text_frame(m)) + len(m)
            held.append(n)
            self._held_bytes += n
        while held and self._held_bytes - held[0] >= buffered:
            self._held_bytes -= held.popleft()
        if buffered > self._max_buffer or len(held) > self._max_queued:
            self._too_slow(len(held), buffered)

    def _too_slow(self, queued: int, nbytes: int | None = None) -> None:
        self.closing = True
        log.warning(
            "WebSocket client %s does not read what it is sent (%d messages%s queued): closed",
            self.client,
            queued,
            "" if nbytes is None else f", {nbytes} bytes",
        )
        self._on_slow(self)

    def _buffered(self) -> int:
        # quiet: asked for every message; a missing transport only means no bound here
        stream = mitm_internals.client_stream(self._master, self.flow, quiet=True)
        if stream is None:
            return 0
        try:
            return stream[0].get_write_buffer_size()
        except (AttributeError, RuntimeError):
            return 0

    def changed(self) -> None:
        """Subscriptions changed: what mitmweb shows for this socket."""
        self.flow.comment = self.describe()

    def describe(self) -> str:
        text = f"WebSocket JSON-RPC, {self.network}: {self.calls} message(s)"
        if self.reads is not None and self.reads.messages:
            text += f" ({self.reads.messages} read directly)"
        if self.subscriptions:
            methods = sorted(set(self.subscriptions.values()))
            text += f", {len(self.subscriptions)} subscription(s): {', '.join(methods)}"
        return text
