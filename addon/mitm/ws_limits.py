"""A client's WebSocket message size bound, for ``addon/mitm/limits.py`` (its
item 4): mitmproxy gathers a message whole, with no bound; past
``ws_message_bytes`` (or ``MAX_FRAGMENTS`` frames) the rest is read and
dropped, and the addon answers the message with the contract's -32600."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import wsproto
import wsproto.events

from addon.rpc.jsonrpc import INVALID_REQUEST, error_obj

MAX_FRAGMENTS = 4096  # frames of one client message (empty ones cost mitmproxy a list entry)
_MSG_KEY = "_chainproxy_message"  # (bytes, frames) of the client message being received


def client_events(
    conn: Any, limit: int, refused: dict[str, dict[str, Any]]
) -> Generator[wsproto.events.Event, None, None]:
    """wsproto's ``events()``; on the client's side a message passing the byte
    ``limit`` (or ``MAX_FRAGMENTS``) is no longer gathered: what mitmproxy holds
    of it is dropped and the rest reaches it empty, so it costs no memory; once
    it ends, ``refused`` has its answer under the connection's id (the
    contract's -32600, as a POST of it would get) and the socket stays open."""
    if conn.client or not limit:  # the sink's side, or no limit
        yield from wsproto.Connection.events(conn)
        return
    for event in wsproto.Connection.events(conn):
        if isinstance(event, wsproto.events.Message):
            data = event.data  # str for text: its UTF-8 length, cheaply when ASCII
            n = len(data) if not isinstance(data, str) or data.isascii() else len(data.encode())
            size, frames = getattr(conn, _MSG_KEY, (0, 0))
            size, frames = size + n, frames + event.frame_finished
            over = size > limit or frames > MAX_FRAGMENTS
            if over:
                conn.frame_buf = [b""]  # mitmproxy's pieces of this message
                event = type(event)(
                    data="" if isinstance(data, str) else b"",
                    frame_finished=event.frame_finished,
                    message_finished=event.message_finished,
                )
            if event.message_finished:
                if over:
                    refused[conn.conn.id] = too_large(size, frames, limit)
                size = frames = 0
            setattr(conn, _MSG_KEY, (size, frames))
        yield event


def too_large(size: int, frames: int, limit: int) -> dict[str, Any]:
    if size > limit:  # the gate's words for a POST body (addon/pipeline/gate.py)
        message = f"body too large: {size} bytes, the limit is {limit}"
        return error_obj(None, INVALID_REQUEST, message, {"limit": limit})
    message = f"message in {frames} fragments, the limit is {MAX_FRAGMENTS}"
    return error_obj(None, INVALID_REQUEST, message, {"limit_fragments": MAX_FRAGMENTS})
