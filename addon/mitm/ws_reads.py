"""Direct reads of a client's WebSocket: the fifth use of mitmproxy's
internals, under the same version guard as the others (``internals.py``).

Why: about two thirds of a WebSocket cache hit's CPU was mitmproxy's path for
each client message (a ``DataReceived`` through the layer stack, wsproto, a
``WebSocketMessage`` kept on the flow, a task and a hook dispatch per message:
docs/BENCHMARKS.md, issue 28). The answers already go straight to the socket
(``internals.client_writer``); this takes the other direction too.

How: on a plain-text RPC socket (one that has a direct writer), the client's
``ConnectionHandler`` gets, on that one instance, a ``server_event`` that
passes everything to mitmproxy's own except the client's bytes, which go to a
``FrameReader`` (``addon/mitm/frames.py``): each whole message to
``on_message`` (the pipeline; what it returns is awaited before the next read,
which is the back-pressure), a ping answered with a pong, a pong to ``on_pong``
(the keep-alive's: ``addon/sockets/keepalive.py``). The
reads are taken over only when mitmproxy's WebSocket layer is at a frame
boundary with nothing queued (it may still be busy with a message that came
right after the handshake: that read is left to it, and the next one tried).
They are given back to mitmproxy for good at the first frame the reader does
not take (a close above all), with every byte from that frame on, and on
``release`` (the socket's end, a hot reload), so mitmproxy's layer ends the
socket as it always has: ``websocket_end``, the closing handshake, the sink.

mitmproxy's inactivity clock is kept going (``timeout_watchdog``), as its own
``server_event`` would. Messages read here are not kept on the flow (mitmweb
shows none), as the direct answers are not: mitmweb users turn
``chainproxy_ws_direct`` off and both go through mitmproxy.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from mitmproxy import http
from mitmproxy.proxy import events
from mitmproxy.proxy.layers import websocket as mitm_ws

from addon.mitm import internals as mitm_internals
from addon.mitm.frames import PING, PONG, FrameReader, pong_frame
from addon.mitm.internals import handler_assumptions

log = logging.getLogger("chainproxy")

OnMessage = Callable[[bytes], Awaitable[None] | None]
OnPong = Callable[[], None]
MaxMessage = Callable[[], int]  # the limit in force: a reload may change it mid-socket


class DirectReads:
    """One socket's reads, from ``take`` until ``release`` or a hand-over."""

    def __init__(
        self,
        handler: Any,
        path: list[Any],
        writer: Any,
        on_message: OnMessage,
        max_message: MaxMessage,
        on_pong: OnPong | None = None,
    ) -> None:
        self.handler = handler
        self.path = path  # the layers down to the socket's WebSocket layer
        self.client = handler.client
        self.writer = writer
        self.on_message = on_message
        self.on_pong = on_pong
        self.max_message = max_message
        self.reader = FrameReader(max_message())
        self.ready = False  # mitmproxy's layer was once at a frame boundary, idle
        self.released = False
        self.messages = 0  # read here (the tests and the flow's comment)
        self._original = handler.server_event  # mitmproxy's own, bound to the handler

    def install(self) -> None:
        self.handler.server_event = self.server_event

    def release(self) -> None:
        """Back to mitmproxy from now on. A frame half read here goes to it
        with the next bytes (it must see the frame from its first byte)."""
        self.released = True
        if not self.reader.buf:
            self._restore()

    def _restore(self) -> None:
        if vars(self.handler).get("server_event") == self.server_event:
            del self.handler.server_event  # mitmproxy's method again

    async def server_event(self, event: events.Event) -> None:
        if type(event) is not events.DataReceived or event.connection is not self.client:
            return await self._original(event)
        if self.released:
            rest = bytes(self.reader.buf) + event.data
            self._restore()
            return await self._original(events.DataReceived(self.client, rest))
        if not self.ready:
            if not at_frame_boundary(self.path):
                return await self._original(event)  # mitmproxy is mid-message: its read
            self.ready = True
        self.handler.timeout_watchdog.register_activity()
        reader = self.reader
        reader.max_message = self.max_message()  # a reload's limit, as mitmproxy's path applies it
        for opcode, payload in reader.feed(event.data):
            if opcode == PING:
                self.writer.write(pong_frame(payload))
            elif opcode == PONG:
                if self.on_pong is not None:
                    self.on_pong()
            else:
                self.messages += 1
                pending = self.on_message(payload)
                if pending is not None:
                    await pending  # too many calls in flight: read no more until one ends
        if reader.handover is not None:
            self._restore()
            if reader.handover:
                await self._original(events.DataReceived(self.client, reader.handover))
        return None


def take(
    master: Any,
    flow: http.HTTPFlow,
    on_message: OnMessage,
    max_message: MaxMessage,
    on_pong: OnPong | None = None,
) -> DirectReads | None:
    """The client's reads of ``flow``'s socket taken over, or None where that
    is not safe (an untested mitmproxy, a TLS client, no handler or layer)."""
    found = mitm_internals.plain_client(master, flow)
    if found is None:
        return None
    handler, writer = found
    path = find_layer(handler, flow)
    if path is None:
        log.debug("chainproxy: no direct WebSocket reads (no WebSocket layer found)")
        return None
    reads = DirectReads(handler, path, writer, on_message, max_message, on_pong)
    reads.install()
    return reads


def find_layer(handler: Any, flow: http.HTTPFlow) -> list[Any] | None:
    """The layers from the handler's root down to ``flow``'s WebSocket layer
    (next layers, the mode's child, the HTTP layer's streams), or None."""
    todo: list[tuple[Any, list[Any]]] = [(getattr(handler, "layer", None), [])]
    for _ in range(64):  # a handful of levels deep; bounded whatever happens
        if not todo:
            return None
        layer, above = todo.pop()
        if layer is None:
            continue
        path = [*above, layer]
        if isinstance(layer, mitm_ws.WebsocketLayer):
            if layer.flow is flow:
                return path
            continue
        todo.append((getattr(layer, "layer", None), path))
        todo.append((getattr(layer, "child_layer", None), path))
        streams = getattr(layer, "streams", None)
        if isinstance(streams, dict):
            todo.extend((stream, path) for stream in streams.values())
    return None


def at_frame_boundary(path: list[Any]) -> bool:
    """mitmproxy's side of the client's socket has nothing of a frame or a
    message in hand, and no layer on the way to it holds events back (none
    waits for a hook): a read taken here is whole to us."""
    layer = path[-1]
    try:
        ws = layer.client_ws
        proto = ws._proto
        decoder = proto._frame_decoder
        return (
            all(lay._paused is None and not lay._paused_event_queue for lay in path)
            and not ws._events
            and ws.frame_buf == [b""]
            and len(decoder.buffer) == 0
            and decoder.header is None
            and proto._message_decoder.opcode is None
        )
    except AttributeError:
        return False


def assumptions() -> list[tuple[str, bool]]:
    """What the direct reads rely on, by name (tests/addon/mitm checks them)."""
    return [
        *handler_assumptions(),
        ("WebsocketLayer.client_ws", "client_ws" in mitm_ws.WebsocketLayer.__annotations__),
        (
            "WebsocketConnection.frame_buf",
            "frame_buf" in mitm_ws.WebsocketConnection.__annotations__,
        ),
    ]
