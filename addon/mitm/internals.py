"""Every use of mitmproxy's internals, in one place, each behind a version guard.

chainproxy reaches past mitmproxy's public API in three spots, each for a
measured reason (docs/BENCHMARKS.md, docs/DESIGN-NOTES.md):

1. **Fast event dispatch**: ``AddonManager.trigger_event`` replaced on the one
   instance by a version that skips addons without a handler (``chain``,
   ``invoke_addon``, ``_iter_hooks``).
2. **Direct response building**: ``http.Response`` made without
   ``MessageData.__post_init__``'s type checks (``object.__new__``).
3. **WebSocket back-pressure and direct frames**: the client's asyncio
   transport found through ``proxyserver.connections`` and paused (asyncio's
   ``StreamReader._paused`` taken over); and, on plain-text client sockets,
   answers and notifications written to it as whole WebSocket frames instead of
   through ``inject.websocket`` (which runs mitmproxy's whole event dispatch per
   message: ~0.4 ms each, too slow to fan a head out to a thousand subscribers).

A fourth, limits mitmproxy lacks on what a client sends (request head size,
slow requests, its own 413 page, WebSocket message size, a socket it can leave
open), lives in ``addon/mitm/limits.py`` (for this file's size), under the
same version guard.

``TESTED`` lists the mitmproxy versions these were written and tested
against (``addon/mitm/versions.py``: wsproto's too). On any other version
chainproxy refuses to start (``versions.VersionGuard``); an operator who
accepts it with ``chainproxy_allow_untested`` gets every helper here on the
public API (slower) and the bounds of ``limits.py`` and ``idle.py`` off, each
named at start and in ``/metrics``. Nothing else falls back silently: each
fallback logs why.
tests/addon/mitm/test_internals.py checks each assumption against the installed
mitmproxy, so an upgrade that breaks one fails there first.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
import types
from collections.abc import Callable
from typing import Any

from mitmproxy import exceptions, http
from mitmproxy.addonmanager import safecall
from mitmproxy.net.http import status_codes

from addon.mitm import versions

log = logging.getLogger("chainproxy")

TESTED = versions.TESTED["mitmproxy"]
VERSION = versions.INSTALLED["mitmproxy"]
KNOWN = versions.KNOWN  # mitmproxy and wsproto both tested
_MARK = "_chainproxy_fast_dispatch"


def check_version() -> bool:
    """True when mitmproxy and wsproto are versions the internals were tested
    with; else the public API everywhere (``versions.VersionGuard`` has said so
    at start, or refused to start)."""
    return KNOWN


# --- 1. fast event dispatch ------------------------------------------------------------

_addon_log = logging.getLogger("mitmproxy.addonmanager")  # where safecall() reports


def _report(exc: BaseException) -> None:
    """mitmproxy's "Addon error" report of a failing handler (``safecall()``): the
    same message, the traceback trimmed to the handler's frames."""
    tb = exc.__traceback__
    t = tb
    while t is not None:  # drop this dispatcher's frames, as safecall() drops invoke_addon's
        if t.tb_frame.f_code.co_name == "_trigger_event" and t.tb_next is not None:
            tb = t.tb_next
        t = t.tb_next
    _addon_log.error(f"Addon error: {exc}", exc_info=(type(exc), exc, tb))


def _as_in_a_coroutine(exc: Exception) -> Exception:
    """A sync handler ran inside mitmproxy's invoke_addon coroutine, where a
    StopIteration becomes RuntimeError (PEP 479); keep the report the same."""
    if isinstance(exc, StopIteration):
        err = RuntimeError("coroutine raised StopIteration")
        err.__cause__ = exc
        err.__traceback__ = exc.__traceback__
        return err
    return exc


async def _trigger_event(self: Any, event: Any) -> None:
    """``AddonManager.trigger_event`` with mitmproxy's semantics, less overhead.

    Same order, same handlers, ``AddonHalt`` and ``OptionsError`` as there, a
    failing handler reported as mitmproxy does ("Addon error: …" on the
    ``mitmproxy.addonmanager`` logger, traceback trimmed to the handler); what
    changes is the cost. mitmproxy enters a generator-based ``safecall()``
    context, starts an ``invoke_addon`` coroutine, walks a generator and rebuilds
    the hook's argument list (``dataclasses.fields``) for every addon and every
    event; here an addon without a handler costs one ``getattr`` and the
    arguments are built once per event. An addon with sub-addons (the script
    loader, which holds chainproxy's own stages; mitmweb's) walks its tree with
    mitmproxy's ``_iter_hooks`` (a failing handler ends its subtree, as in
    ``invoke_addon``); so does a plain addon whose handler just gave it
    sub-addons. Anything unusual (a handler attribute that is not callable, a
    ``getattr`` or truth test that raises) takes mitmproxy's own path."""
    name = event.name
    args: list[Any] | None = None
    for addon in self.chain:
        try:
            plain = not hasattr(addon, "addons")
            func = getattr(addon, name, None) if plain else None
            idle = plain and not func  # mitmproxy's own test: ``if func:``
        except Exception:
            plain, func, idle = False, None, False  # mitmproxy's path meets (and logs) it
        if idle:
            continue
        if plain and not callable(func):
            try:
                with safecall():
                    await self.invoke_addon(addon, event)
            except exceptions.AddonHalt:
                return
            continue
        if args is None:
            args = event.args()
        try:
            if plain:
                res = func(*args)  # type: ignore[misc]  # func: getattr(addon, name), callable here
                if res is not None and inspect.isawaitable(res):
                    await res
                if not hasattr(addon, "addons"):
                    continue
                # the handler gave it sub-addons: mitmproxy's traverse() looks
                # only now, so they see this very event
                tree = addon.addons
            else:
                tree = [addon]
            for sub in tree:
                for _, handler in self._iter_hooks(sub, event):
                    res = handler(*args)
                    if res is not None and inspect.isawaitable(res):
                        await res
        except exceptions.AddonHalt:
            return
        except exceptions.OptionsError:
            raise  # safecall() lets these through too
        except Exception as e:
            _report(_as_in_a_coroutine(e))


def set_fast_dispatch(master: Any, on: bool) -> None:
    """Install (or remove) the fast ``trigger_event`` on ``master.addons``."""
    manager = master.addons
    if on and not check_version():
        on = False
    installed = getattr(manager, _MARK, False)
    if on and not all(hasattr(manager, a) for a in ("chain", "invoke_addon", "_iter_hooks")):
        log.error("chainproxy: mitmproxy's addon manager has changed: fast dispatch is off")
        return
    if on and not installed:
        manager.trigger_event = types.MethodType(_trigger_event, manager)
        setattr(manager, _MARK, True)
    elif not on and installed:
        del manager.trigger_event  # mitmproxy's own method again
        setattr(manager, _MARK, False)


# --- 2. responses without the per-object type check --------------------------------


@functools.cache
def _reason(status: int) -> bytes:
    return status_codes.RESPONSES.get(status, "").encode()


def _response_make(
    status: int, body: bytes, fields: tuple[tuple[bytes, bytes], ...]
) -> http.Response:
    return http.Response.make(status, body, http.Headers(fields))


def _response_direct(
    status: int, body: bytes, fields: tuple[tuple[bytes, bytes], ...]
) -> http.Response:
    """What ``Response.make`` builds (same fields, same ``content-length``), without
    its per-object type check (``MessageData.__post_init__``, ~50 µs: a third of
    the addon's own CPU per request). The types are ours and fixed; the result is
    compared with ``Response.make``'s once at import, see ``response_builder``."""
    now = time.time()
    data = object.__new__(http.ResponseData)
    data.__dict__.update(
        http_version=b"HTTP/1.1",
        headers=http.Headers((*fields, (b"content-length", str(len(body)).encode()))),
        content=body,
        trailers=None,
        timestamp_start=now,
        timestamp_end=now,
        status_code=status,
        reason=_reason(status),
    )
    response = object.__new__(http.Response)
    response.data = data
    return response


def response_builder() -> Callable[[int, bytes, tuple[tuple[bytes, bytes], ...]], http.Response]:
    """The direct builder if it yields exactly what ``Response.make`` does on this
    mitmproxy version, else ``Response.make`` itself (and a log line saying so)."""
    if not check_version():
        return _response_make
    try:
        fields = ((b"Content-Type", b"application/json"), (b"X-Cache", b"MISS"))
        for status, body in ((200, b'{"a":1}'), (429, b""), (599, b"x")):
            made, direct = (
                _response_make(status, body, fields),
                _response_direct(status, body, fields),
            )
            if vars(made).keys() != vars(direct).keys() or type(made.data) is not type(direct.data):
                raise TypeError("Response has other attributes")
            if vars(made.data).keys() != vars(direct.data).keys():
                raise TypeError("ResponseData has other fields")
            a, b = made.get_state(), direct.get_state()
            for state in (a, b):
                state.pop("timestamp_start"), state.pop("timestamp_end")
            if a != b:
                raise ValueError("the direct response differs from Response.make's")
    except Exception as e:
        log.error("chainproxy: direct responses off, using Response.make (%s)", e)
        return _response_make
    return _response_direct


# --- 3. WebSocket back-pressure ----------------------------------------------------


def client_stream(
    master: Any, flow: http.HTTPFlow, *, quiet: bool = False
) -> tuple[asyncio.Transport, Any] | None:
    """The client's asyncio transport and stream reader, from mitmproxy's
    connection handler (None where it is not one: another transport, another
    mitmproxy; the caller then relies on the hook's wait alone)."""
    if not KNOWN:
        return None
    try:
        proxyserver = master.addons.get("proxyserver")
        handler = proxyserver.connections.get(flow.client_conn.id)
        if handler is None:
            return None  # the connection has just closed
        io = handler.transports[handler.client]
        transport = io.writer.transport
    except (AttributeError, KeyError, TypeError) as e:
        (log.debug if quiet else log.warning)("chainproxy: no client transport (%s)", e)
        return None
    if hasattr(transport, "pause_reading") and hasattr(transport, "resume_reading"):
        return transport, io.reader
    return None


def pause_reading(transport: asyncio.Transport, reader: Any) -> None:
    transport.pause_reading()
    # asyncio's StreamReader pauses and resumes the transport for its own
    # buffer: had it paused it, its next read would resume what we paused.
    # Take the pause over (it pauses again by itself if its buffer fills).
    if isinstance(reader, asyncio.StreamReader) and getattr(reader, "_paused", False):
        reader._paused = False  # type: ignore[attr-defined]  # asyncio's private flag


def client_writer(master: Any, flow: http.HTTPFlow) -> Callable[[list[bytes]], int] | None:
    """A function writing whole text frames (one per UTF-8 message, in order,
    with one ``write``) straight to the client's socket and returning the bytes
    still unsent there; or None where that is not safe: a TLS client connection
    (mitmproxy encrypts in its own layer), an unknown mitmproxy, no transport.
    Writes happen on the event loop thread, so they never interleave with
    mitmproxy's own frames; server frames are unmasked, and an uncompressed
    message is valid under permessage-deflate too (RFC 7692, RSV1 clear)."""
    if getattr(flow.client_conn, "tls", False):
        return None
    stream = client_stream(master, flow, quiet=True)  # None: inject (the public API)
    if stream is None:
        return None
    transport = stream[0]
    activity = client_activity(master, flow)

    def write(messages: list[bytes]) -> int:
        transport.write(b"".join(frame for m in messages for frame in (text_frame(m), m)))
        activity()
        return transport.get_write_buffer_size()

    return write


def client_activity(master: Any, flow: http.HTTPFlow) -> Callable[[], None]:
    """What tells mitmproxy's inactivity clock (``tcp_timeout``) that the
    connection is in use: each message it injects does (``server_event``),
    so each frame written directly must too, or a client that only listens to
    its subscriptions is cut after ``tcp_timeout``. A no-op where unknown."""
    try:
        handler = master.addons.get("proxyserver").connections.get(flow.client_conn.id)
        return handler.timeout_watchdog.register_activity
    except AttributeError:
        return _nothing


def _nothing() -> None:
    return None


def text_frame(payload: bytes) -> bytes:
    """The header of one unmasked, final text frame (RFC 6455 5.2) for ``payload``
    (the bytes follow it). wsproto's ``FrameProtocol`` builds the same; this is
    the per-notification hot path of a fan-out, so it is three lines here."""
    n = len(payload)
    if n < 126:
        return bytes((0x81, n))
    if n < 65536:
        return b"\x81\x7e" + n.to_bytes(2, "big")
    return b"\x81\x7f" + n.to_bytes(8, "big")


def plain_client(master: Any, flow: http.HTTPFlow) -> tuple[Any, Any] | None:
    """The connection handler of ``flow``'s client and its socket's writer,
    where chainproxy may read that socket itself (``http_reads``, ``ws_reads``):
    a tested mitmproxy and a plain-text client (mitmproxy decrypts TLS in a
    layer of its own); else None."""
    if not KNOWN or getattr(flow.client_conn, "tls", False):
        return None
    return handler_writer(master, flow.client_conn.id)


def handler_writer(master: Any, conn_id: str) -> tuple[Any, Any] | None:
    """A client connection's handler and its socket's writer, or None (gone,
    or another mitmproxy)."""
    try:
        handler = master.addons.get("proxyserver").connections.get(conn_id)
        if handler is None:
            return None
        writer = handler.transports[handler.client].writer
    except (AttributeError, KeyError, TypeError):
        return None
    return (handler, writer) if writer is not None else None


# --- 5. Idle connections -----------------------------------------------------------


def close_client(master: Any, conn_id: str) -> bool:
    """Close a client connection by id (one that sent nothing for too long):
    its writer is closed and mitmproxy's handler ends as on a client's close.
    False where that is not possible (another mitmproxy, already gone)."""
    found = handler_writer(master, conn_id) if KNOWN else None
    if found is None:
        return False
    writer = found[1]
    if writer.is_closing():
        return False
    writer.close()
    return True


def handler_assumptions() -> list[tuple[str, bool]]:
    """What both direct read paths (``ws_reads``, ``http_reads``) rely on in
    mitmproxy's ``ConnectionHandler``: its ``server_event`` to swap, its
    inactivity clock to keep going."""
    from mitmproxy.proxy import server

    return [
        (
            "ConnectionHandler.server_event",
            callable(getattr(server.ConnectionHandler, "server_event", None)),
        ),
        (
            "ConnectionHandler.timeout_watchdog",
            "timeout_watchdog" in server.ConnectionHandler.__annotations__,
        ),
    ]
