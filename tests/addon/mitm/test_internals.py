"""Every mitmproxy internal chainproxy relies on (addon/mitm/internals.py),
checked against the installed mitmproxy, and the public-API fallback of each.

An upgrade of mitmproxy that moves one of these fails here first, with the
name of what moved, instead of silently slowing or breaking the proxy."""

from __future__ import annotations

import asyncio
import logging
import socket
from types import SimpleNamespace
from typing import Any

import pytest
from mitmproxy import http
from mitmproxy.addonmanager import AddonManager
from mitmproxy.options import Options
from mitmproxy.proxy import mode_specs
from mitmproxy.proxy.server import SimpleConnectionHandler
from mitmproxy.test import taddons, tflow

from addon.mitm import internals as mitm_internals


async def _connected(sock: socket.socket) -> tuple[Any, Any, Any, Any]:
    """A real mitmproxy connection handler over ``sock``, found by a master's
    proxyserver as mitmproxy's own is: (reader, writer, flow, master)."""
    reader, writer = await asyncio.open_connection(sock=sock)
    handler = SimpleConnectionHandler(
        reader, writer, Options(), mode_specs.ProxyMode.parse("regular"), {}
    )
    flow = tflow.tflow()
    flow.client_conn = handler.client
    proxyserver = SimpleNamespace(connections={handler.client.id: handler})
    master = SimpleNamespace(addons=SimpleNamespace(get=lambda name: proxyserver))
    return reader, writer, flow, master


def test_the_installed_mitmproxy_is_a_tested_version() -> None:
    # The pin in pyproject.toml and TESTED move together: a new mitmproxy means
    # re-running this file, the benchmarks and the WebSocket e2e before adding it.
    assert mitm_internals.VERSION in mitm_internals.TESTED
    assert mitm_internals.check_version() is True


def test_the_addon_manager_has_what_the_fast_dispatch_uses() -> None:
    with taddons.context() as tctx:
        manager = tctx.master.addons
        assert isinstance(manager, AddonManager)
        for name in ("chain", "invoke_addon", "_iter_hooks", "trigger_event"):
            assert hasattr(manager, name), f"AddonManager.{name} is gone"
        mitm_internals.set_fast_dispatch(tctx.master, True)
        assert manager.trigger_event.__func__ is mitm_internals._trigger_event  # type: ignore[attr-defined]
        mitm_internals.set_fast_dispatch(tctx.master, False)
        assert "trigger_event" not in vars(manager)  # mitmproxy's own method again


def test_direct_responses_are_what_response_make_builds() -> None:
    assert mitm_internals.response_builder() is mitm_internals._response_direct
    fields = ((b"Content-Type", b"application/json"), (b"X-A", b"1"))
    direct = mitm_internals._response_direct(404, b'{"x":1}', fields)
    made = http.Response.make(404, b'{"x":1}', http.Headers(fields))
    a, b = direct.get_state(), made.get_state()
    for state in (a, b):
        state.pop("timestamp_start"), state.pop("timestamp_end")
    assert a == b
    assert direct.headers["content-length"] == "7" and direct.reason == "Not Found"


async def test_the_client_transport_is_found_and_paused_through_the_connection_handler() -> None:
    """A real mitmproxy connection handler over a real socket pair: the path
    ``proxyserver.connections[id].transports[client].writer.transport``."""
    left, right = socket.socketpair()
    try:
        reader, writer, flow, master = await _connected(left)
        found = mitm_internals.client_stream(master, flow)
        assert found is not None, "mitmproxy's connection handler has changed"
        transport, got_reader = found
        assert transport is writer.transport and got_reader is reader
        assert hasattr(reader, "_paused"), "asyncio.StreamReader._paused is gone"
        reader._paused = True  # type: ignore[attr-defined]  # as after its buffer filled
        mitm_internals.pause_reading(transport, reader)
        assert transport.is_reading() is False and reader._paused is False  # type: ignore[attr-defined]
        transport.resume_reading()
        writer.close()
    finally:
        right.close()


def test_a_closed_connection_has_no_transport_and_no_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    master = SimpleNamespace(
        addons=SimpleNamespace(get=lambda name: SimpleNamespace(connections={}))
    )
    with caplog.at_level(logging.WARNING):
        assert mitm_internals.client_stream(master, tflow.tflow()) is None
    assert caplog.records == []


def test_a_changed_connection_handler_is_logged_not_silent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    flow = tflow.tflow()
    odd = SimpleNamespace()  # no transports, no client
    master = SimpleNamespace(
        addons=SimpleNamespace(
            get=lambda name: SimpleNamespace(connections={flow.client_conn.id: odd})
        )
    )
    with caplog.at_level(logging.WARNING):
        assert mitm_internals.client_stream(master, flow) is None
    assert "no client transport" in caplog.text


def test_an_unknown_mitmproxy_gets_the_public_api_without_a_word(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Accepted by the operator (addon/mitm/versions.py refuses it otherwise, and
    # says what is off): every helper takes the public API, and logs no error,
    # which would make mitmproxy's errorcheck end the start-up.
    monkeypatch.setattr(mitm_internals, "KNOWN", False)
    monkeypatch.setattr(mitm_internals, "VERSION", "99.0.0")
    with caplog.at_level(logging.WARNING):
        assert mitm_internals.check_version() is False
        assert mitm_internals.response_builder() is mitm_internals._response_make
        flow = tflow.tflow()
        master: Any = SimpleNamespace(addons=SimpleNamespace(get=lambda name: 1 / 0))
        assert mitm_internals.client_stream(master, flow) is None  # never looked
        assert mitm_internals.close_client(master, "c1") is False
        with taddons.context() as tctx:
            mitm_internals.set_fast_dispatch(tctx.master, True)
            assert "trigger_event" not in vars(tctx.master.addons)
    assert caplog.records == []


def test_text_frames_are_what_wsproto_builds() -> None:
    from wsproto.frame_protocol import FrameProtocol

    for n in (0, 5, 125, 126, 65535, 65536, 70000):
        payload = b"a" * n
        wsproto = bytes(FrameProtocol(client=False, extensions=[]).send_data("a" * n, fin=True))
        assert mitm_internals.text_frame(payload) + payload == wsproto


async def test_direct_frames_reach_the_client_whole_and_never_on_tls() -> None:
    left, right = socket.socketpair()
    try:
        _reader, writer, flow, master = await _connected(left)
        write = mitm_internals.client_writer(master, flow)
        assert write is not None
        assert write([b'{"a":1}']) >= 0
        write([b"x" * 200])  # a 16-bit length
        await writer.drain()
        right.setblocking(False)
        got = b""
        for _ in range(50):
            try:
                got += right.recv(4096)
            except BlockingIOError:
                await asyncio.sleep(0.01)
            if len(got) >= 9 + 204:
                break
        assert got[:9] == b'\x81\x07{"a":1}'  # FIN + text, unmasked, 7 bytes
        assert got[9:13] == b"\x81\x7e\x00\xc8" and got[13:] == b"x" * 200
        flow.client_conn.tls = True
        assert mitm_internals.client_writer(master, flow) is None  # mitmproxy encrypts there
        writer.close()
    finally:
        right.close()
