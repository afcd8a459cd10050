"""Read limits mitmproxy 12.2.3 lacks, added to its HTTP/1 and WebSocket layers.

The fourth use of mitmproxy's internals (see ``addon/mitm/internals.py``, whose
version guard this module obeys: on an untested mitmproxy or wsproto nothing
here is installed and ``install`` returns False; chainproxy refuses to start
there unless the operator accepts it, ``addon/mitm/versions.py``). Each closes
a hole measured here against mitmproxy itself:

1. **Request head size.** mitmproxy buffers a request head until its blank
   line, with no bound ("FIXME: protect against header size DoS" in
   ``Http1Server.read_headers``). A head over ``HEAD_LIMIT`` gets a JSON-RPC
   431 and the connection is closed.
2. **Slow requests (slow-loris).** mitmproxy's only clock is ``tcp_timeout``
   (600 s of *silence*), so a client sending one byte a second holds its
   connection for ever. A request (head and body) must arrive within
   ``read_timeout_s`` of its first byte, else a JSON-RPC 408 and the connection
   is closed (``addon/mitm/slow_requests.py``). Idle keep-alive connections are
   not affected (no request begun).
3. **Body over ``body_size_limit``.** mitmproxy stops reading there (a chunked
   body too) and answers with an HTML page; the contract's JSON-RPC 413 is sent
   instead, so the limit can be the JSON-RPC limit itself. After the "100
   Continue" it sends for ``Expect: 100-continue`` it sent nothing at all (it
   took the interim answer for the answer, ``server_send``): the 413 is sent.
4. **WebSocket message size** (``addon/mitm/ws_limits.py``). mitmproxy
   gathers a message whole, with no bound (by repeated ``bytes +=``,
   quadratic in its pieces; a list entry per frame).
   A client message passing ``ws_message_bytes`` (or ``MAX_FRAGMENTS`` frames)
   is not gathered past that point: the rest is read and dropped, and the
   addon answers it with the contract's -32600 (``refused_message``); the
   socket stays open.
5. **Leaked sockets.** When mitmproxy closes a client while that client's
   reader waits for the handler's event lock (it does when it refuses a body
   it is still receiving), the cancellation ends the reader before it closes
   the socket: one open socket, its unread bytes and an fd, for ever, per
   refused body. The socket is closed when its reader ends, however it ends.

All of it belongs to one ``ReadLimits`` (``build_addons`` makes one per
script load, with its addon ``ReadLimitsAddon``): its limits, its slow-request
tracker and its refused WebSocket messages are its own, the functions it puts
into mitmproxy close over it, and ``uninstall`` (the addon's ``done``: a
script reload, or the end) puts mitmproxy's own functions back, so a reload
never stacks patches nor keeps an old instance's.

tests/addon/mitm/test_limits.py checks each internal this relies on;
tests/e2e/test_slow_clients_e2e.py and test_ws_fuzz_e2e.py the behaviour.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import wsproto
import wsproto.events
from mitmproxy import http
from mitmproxy.proxy import commands, events, server
from mitmproxy.proxy.layers import websocket as mitm_ws
from mitmproxy.proxy.layers.http import _http1
from mitmproxy.proxy.layers.http._base import ReceiveHttp as _ReceiveHttp
from mitmproxy.proxy.layers.http._events import RequestProtocolError, ResponseProtocolError

from addon.mitm import internals as mitm_internals
from addon.mitm.http_requests import HEAD_LIMIT, head_too_large
from addon.mitm.responses import json_error
from addon.mitm.slow_requests import SlowRequests
from addon.mitm.ws_limits import client_events
from addon.rpc.jsonrpc import INTERNAL_ERROR

log = logging.getLogger("chainproxy")


@dataclass
class Limits:
    body_bytes: int = 0  # mitmproxy's body_size_limit, named in the 413 (0: mitmproxy's page)
    read_timeout_s: float = 30.0
    ws_message_bytes: int = 0  # 0: no bound (mitmproxy's own behaviour)


# mitmproxy's own functions, as imported (before any patch): the wrappers call
# these, and ``done`` puts them back. ``_ABSENT``: inherited, not set there.
_ABSENT = object()
_READ_HEADERS = (_http1.Http1Server, "read_headers")
_ERROR_RESPONSE = (_http1, "make_error_response")
_WS_EVENTS = (mitm_ws.WebsocketConnection, "events")
_HANDLE_CONNECTION = (server.ConnectionHandler, "handle_connection")
_SERVER_SEND = (_http1.Http1Server, "send")
_SERVER_READ_BODY = (_http1.Http1Server, "read_body")  # inherited: set on the server side only
_ORIGINALS: dict[tuple[Any, str], Any] = {
    t: vars(t[0]).get(t[1], _ABSENT)
    for t in (
        _READ_HEADERS,
        _ERROR_RESPONSE,
        _WS_EVENTS,
        _HANDLE_CONNECTION,
        _SERVER_SEND,
        _SERVER_READ_BODY,
    )
}
_ORIGINAL_READ_HEADERS = _ORIGINALS[_READ_HEADERS]
_ORIGINAL_ERROR_RESPONSE = _ORIGINALS[_ERROR_RESPONSE]
_ORIGINAL_HANDLE_CONNECTION = _ORIGINALS[_HANDLE_CONNECTION]
_ORIGINAL_SERVER_SEND = _ORIGINALS[_SERVER_SEND]
_READ_BODY = _http1.Http1Connection.read_body


class ReadLimits:
    """The read limits, patched into mitmproxy (see the module's docstring).

    Its addon (``addon/hooks/read_limits.py``) installs the patches on
    ``load`` (with the default limits until the config is read) and removes
    them on ``done``; ``install(limits)`` is also the ``Settings`` addon
    handing over each config's limits."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits = Limits()
        self.slow = SlowRequests(self.limits, clock)
        self._refused: dict[str, dict[str, Any]] = {}  # client conn id -> its last message's answer
        self._patches: dict[tuple[Any, str], Any] = {}  # where -> the function of ours there
        self._said = False  # the "mitmproxy has changed" error, logged once

    @property
    def installed(self) -> bool:
        return bool(self._patches)

    def install(self, limits: Limits | None = None) -> bool:
        """Use ``limits`` from now on (each config passes its own); patch
        mitmproxy the first time. False (and one error line) where the patches
        are not safe."""
        if limits is not None:
            self.limits.body_bytes = limits.body_bytes
            self.limits.read_timeout_s = limits.read_timeout_s
            self.limits.ws_message_bytes = limits.ws_message_bytes
        if self._patches:
            return True
        if not mitm_internals.check_version():
            return False
        missing = [name for name, ok in _assumptions() if not ok]
        if missing:
            if not self._said:
                log.error(
                    "chainproxy: read limits off, mitmproxy has changed: %s", ", ".join(missing)
                )
                self._said = True
            return False
        # Each replaces what is there (mitmproxy's own, or an instance's whose
        # ``done`` never came): the wrappers call mitmproxy's originals, never
        # what they replace, so patches cannot stack.
        self._patches = self._wrappers()
        for (where, name), fn in self._patches.items():
            setattr(where, name, fn)
        return True

    def uninstall(self) -> None:
        """mitmproxy's own functions back where this instance's are (a newer
        instance's are left alone). What it already holds finishes under it: a
        request it times (its sweep stops once none is left) and a connection
        whose layer waits in its ``read_headers`` (for one request more)."""
        for (where, name), fn in self._patches.items():
            if vars(where).get(name) is not fn:
                continue
            original = _ORIGINALS[where, name]
            if original is _ABSENT:
                delattr(where, name)
            else:
                setattr(where, name, original)
        self._patches = {}
        self._refused.clear()

    def refused_message(self, conn_id: str) -> dict[str, Any] | None:
        """The JSON-RPC error for the client message just received on this
        connection when it was over the limits (its content was not kept); None
        for a message within them. Asked once per message (the answer is
        forgotten)."""
        return self._refused.pop(conn_id, None)

    def _wrappers(self) -> dict[tuple[Any, str], Any]:
        """This instance's functions for mitmproxy, each closing over it."""
        limits, slow = self.limits, self.slow

        def read_headers(layer: Any, event: Any) -> Generator[Any, None, None]:
            """A head past ``HEAD_LIMIT`` refused; else mitmproxy's
            ``Http1Server.read_headers``, then a request still incomplete is
            timed."""
            if not isinstance(event, events.DataReceived):
                yield from _ORIGINAL_READ_HEADERS(layer, event)
                return  # a close: mitmproxy ends the connection
            # (``layer.buf`` holds this read already: mitmproxy adds it first)
            if len(layer.buf) > HEAD_LIMIT and head_too_large(bytes(layer.buf)):
                # whether it ends in this read or not (mitmproxy takes any head
                # that ends in the read that crosses the limit)
                big = f"request head too large: the limit is {HEAD_LIMIT} bytes"
                yield commands.SendData(layer.conn, json_error(431, big, {"limit": HEAD_LIMIT}))
                yield commands.CloseConnection(layer.conn)
                layer.state = layer.done
                slow.forget(layer)
                return
            before = len(layer.buf)
            yield from _ORIGINAL_READ_HEADERS(layer, event)
            state = getattr(layer.state, "__func__", None)
            while state is read_headers and 0 < len(layer.buf) < before:
                # h11 took one empty line before a request line and waits for
                # more bytes, though the request may be whole in the buffer
                # (RFC 9112 2.2: a server ignores such lines): read on
                before = len(layer.buf)
                yield from _ORIGINAL_READ_HEADERS(layer, events.DataReceived(layer.conn, b""))
                state = getattr(layer.state, "__func__", None)
            if state is read_headers:
                if not layer.buf:
                    return  # idle between requests: mitmproxy's tcp_timeout's business
            elif state is None or state not in (_READ_BODY, slow.body_reader):
                return  # the request is complete (the usual case: one read)
            slow.track(layer)

        def read_body(layer: Any, event: Any) -> Generator[Any, None, None]:
            """mitmproxy's ``read_body``; a chunked body ending in trailer
            fields (valid HTTP/1.1, which mitmproxy raises on: the connection
            was left open and unanswered) refused with the JSON 400, closed;
            a body mitmproxy cannot frame (a chunk size that is no number) is
            answered the JSON 400 before the close mitmproxy sends alone."""
            try:
                yield from _framing_answered(layer, event)
            except NotImplementedError:
                why = "chunked trailer fields are not supported"
                data = {"policy": "request", "reason": why}
                yield commands.SendData(layer.conn, json_error(400, why, data))
                yield commands.CloseConnection(layer.conn)
                layer.state = layer.done
                slow.forget(layer)

        def error_response(status_code: int, message: str = "") -> bytes:
            limit = limits.body_bytes
            if status_code != 413 or not limit:
                # mitmproxy's own refusals (a malformed request, CONNECT in
                # reverse mode): the contract's JSON, not its HTML page
                why = message or http.status_codes.RESPONSES.get(status_code, "refused")
                if status_code >= 500:  # its 502 (a connection that failed): no policy's
                    return json_error(status_code, why, None, INTERNAL_ERROR)
                return json_error(status_code, why, {"policy": "request", "reason": why})
            return json_error(
                413,
                f"body too large: more than {limit} bytes, the limit is {limit}",
                {"limit": limit},
            )

        def ws_events(conn: Any) -> Generator[wsproto.events.Event, None, None]:
            return client_events(conn, limits.ws_message_bytes, self._refused)

        async def handle_connection(handler: Any, connection: Any) -> None:
            await _handle_connection(handler, connection)

        slow.head_reader, slow.body_reader = read_headers, read_body
        return {
            _READ_HEADERS: read_headers,
            _ERROR_RESPONSE: error_response,
            _WS_EVENTS: ws_events,
            _HANDLE_CONNECTION: handle_connection,
            # its own function, as each of the others: an old instance's late
            # ``done`` takes out only what is its own
            _SERVER_SEND: lambda layer, event: server_send(layer, event),
            _SERVER_READ_BODY: read_body,
        }


def _assumptions() -> list[tuple[str, bool]]:
    """What the patches rely on, by name (also checked by the unit tests)."""
    return [
        ("Http1Server.read_headers", callable(getattr(_http1.Http1Server, "read_headers", None))),
        ("Http1Connection.read_body", callable(getattr(_http1.Http1Connection, "read_body", None))),
        ("Http1Connection.done", callable(getattr(_http1.Http1Connection, "done", None))),
        ("Http1Server.send", callable(_ORIGINAL_SERVER_SEND)),
        ("_http1.make_error_response", callable(getattr(_http1, "make_error_response", None))),
        ("WebsocketConnection", issubclass(mitm_ws.WebsocketConnection, wsproto.Connection)),
        ("ConnectionHandler.handle_connection", callable(_ORIGINAL_HANDLE_CONNECTION)),
        ("ConnectionHandler.transports", "transports" in server.ConnectionHandler.__annotations__),
    ]


def _framing_answered(layer: Any, event: Any) -> Generator[Any, None, None]:
    """mitmproxy's ``read_body``. On a body it cannot frame it closes the
    connection, then reports the error to the flow, and no answer is sent
    (a request's protocol error gets none from mitmproxy's HTTP layer): that
    close is held back until the report shows it was this, and the JSON 400
    goes first. (No command here takes a value back: each is passed on.)"""
    held = None
    for command in _READ_BODY(layer, event):
        if held is not None:
            error = _request_error(command)
            if error is not None and isinstance(event, events.DataReceived):
                why = "malformed request body: its framing cannot be read"
                data = {"policy": "request", "reason": error.message[:200]}
                yield commands.SendData(layer.conn, json_error(400, why, data))
            yield held
            held = None
        if type(command) is commands.CloseConnection and command.connection is layer.conn:
            held = command
            continue
        yield command
    if held is not None:
        yield held


def _request_error(command: commands.Command) -> RequestProtocolError | None:
    """The request's protocol error ``command`` reports, if that is what it is."""
    if type(command) is _ReceiveHttp and type(command.event) is RequestProtocolError:
        return command.event
    return None


# --- 3: a refusal after "100 Continue" ------------------------------------------------


def server_send(layer: Any, event: Any) -> Generator[Any, None, None]:
    """mitmproxy's ``Http1Server.send``. It takes the interim "100 Continue"
    it sent a client's ``Expect: 100-continue`` for the answer under way, so a
    refusal of the body that follows (a chunked body over ``body_size_limit``:
    curl's way of posting one) closed the connection without the 413. An
    interim answer is not the answer: the refusal is sent. (A plain function
    handing on mitmproxy's generator: no frame of its own on every send.)"""
    if type(event) is ResponseProtocolError:
        response = getattr(layer, "response", None)
        if response is not None and 100 <= response.status_code < 200:
            layer.response = None
    return _ORIGINAL_SERVER_SEND(layer, event)


# --- 5: a reader that ends closes its socket ---------------------------------------------


async def _handle_connection(handler: Any, connection: Any) -> None:
    try:
        await _ORIGINAL_HANDLE_CONNECTION(handler, connection)
    finally:
        # mitmproxy pops the connection after closing it; one still here was
        # left open by a cancellation outside the reader's own try block
        io = handler.transports.get(connection)
        writer = io.writer if io is not None else None
        if writer is not None and not writer.is_closing():
            with contextlib.suppress(OSError, RuntimeError):
                writer.close()
