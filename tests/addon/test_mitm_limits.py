"""The read limits patched into mitmproxy (addon/mitm_limits.py): every
internal they rely on is where they expect it, and each limit does what it
says on mitmproxy's own objects. End to end: tests/e2e/test_slow_clients_e2e.py
and tests/e2e/test_ws_fuzz_e2e.py."""

from __future__ import annotations

import asyncio
import json
import os
import struct
from collections.abc import Iterator
from typing import Any

import pytest
import wsproto
import wsproto.events
from mitmproxy.proxy.layers import websocket as mitm_ws
from mitmproxy.test import tflow

from addon import mitm_limits


@pytest.fixture
def limits() -> Iterator[mitm_limits.Limits]:
    saved = mitm_limits.Limits(**vars(mitm_limits.LIMITS))
    yield mitm_limits.LIMITS
    for k, v in vars(saved).items():
        setattr(mitm_limits.LIMITS, k, v)


def test_every_internal_the_limits_patch_is_there() -> None:
    assert [name for name, ok in mitm_limits._assumptions() if not ok] == []


def test_install_patches_once_and_takes_new_values(limits: mitm_limits.Limits) -> None:
    assert mitm_limits.install(mitm_limits.Limits(1000, 7.0, 2000)) is True
    assert (limits.body_bytes, limits.read_timeout_s, limits.ws_message_bytes) == (1000, 7.0, 2000)
    from mitmproxy.proxy import server
    from mitmproxy.proxy.layers.http import _http1

    assert _http1.Http1Server.read_headers is mitm_limits._read_headers
    assert _http1.make_error_response is mitm_limits._error_response
    assert server.ConnectionHandler.handle_connection is mitm_limits._handle_connection
    assert mitm_limits.install(mitm_limits.Limits(5, 1.0, 6)) is True  # a reload: values only
    assert limits.body_bytes == 5


def _answer(raw: bytes) -> tuple[int, dict[str, str], Any]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    return int(lines[0].split()[1]), headers, json.loads(body)


def test_mitmproxys_413_page_becomes_the_contract_json(limits: mitm_limits.Limits) -> None:
    limits.body_bytes = 4096
    status, headers, doc = _answer(mitm_limits._error_response(413, "too large"))
    assert status == 413 and headers["content-type"] == "application/json"
    assert headers["connection"] == "close" and headers["access-control-allow-origin"] == "*"
    assert doc["id"] is None and doc["error"]["code"] == -32600
    assert doc["error"]["data"] == {"limit": 4096} and "4096" in doc["error"]["message"]
    # mitmproxy's other error pages are its own
    assert b"text/html" in mitm_limits._error_response(400, "Bad request")


def _client_frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    key = os.urandom(4)
    n = len(payload)
    size = bytes((0x80 | n,)) if n < 126 else bytes((0x80 | 126,)) + struct.pack("!H", n)
    masked = bytes(b ^ key[i % 4] for i, b in enumerate(payload))
    return bytes(((0x80 if fin else 0) | opcode,)) + size + key + masked


def _receive(data: bytes, limit_side: bool = True) -> tuple[Any, list[Any]]:
    """mitmproxy's client-side connection fed ``data`` and drained as its relay
    does (gathering message pieces in ``frame_buf``): the connection, the events."""
    kind = wsproto.ConnectionType.SERVER if limit_side else wsproto.ConnectionType.CLIENT
    conn = mitm_ws.WebsocketConnection(kind, [], conn=tflow.tclient_conn())
    conn.receive_data(data)
    got = []
    for event in conn.events():
        got.append(event)
        if isinstance(event, wsproto.events.Message):
            piece = event.data.encode() if isinstance(event.data, str) else event.data
            conn.frame_buf[-1] += piece
            if event.message_finished:
                conn.frame_buf = [b""]
            elif event.frame_finished:
                conn.frame_buf.append(b"")
    return conn, got


def test_a_client_message_past_the_limit_is_not_kept_and_gets_the_413_error(
    limits: mitm_limits.Limits,
) -> None:
    limits.ws_message_bytes = 1000
    conn, ok = _receive(_client_frame(0x1, b"a" * 1000))
    assert [e.data for e in ok] == ["a" * 1000]
    assert mitm_limits.refused_message(conn.conn.id) is None
    # fragments count together; past the limit the pieces come empty
    frames = _client_frame(0x2, b"b" * 600, fin=False) + _client_frame(0x0, b"b" * 600)
    frames += _client_frame(0x1, b"{}")
    conn, got = _receive(frames)
    assert [e.data for e in got] == [b"b" * 600, b"", "{}"]
    refused = mitm_limits.refused_message(conn.conn.id)
    assert refused is not None and refused["error"]["code"] == -32600
    assert refused["error"]["message"] == "body too large: 1200 bytes, the limit is 1000"
    assert refused["error"]["data"] == {"limit": 1000} and refused["id"] is None
    assert mitm_limits.refused_message(conn.conn.id) is None  # once per message
    # what mitmproxy gathered of it was dropped
    conn, got = _receive(_client_frame(0x1, b"c" * 900, fin=False) + _client_frame(0x0, b"c" * 900))
    assert conn.frame_buf == [b""] and mitm_limits.refused_message(conn.conn.id) is not None
    # a finished message starts the count again
    conn, got = _receive(b"".join(_client_frame(0x1, b"d" * 900) for _ in range(5)))
    assert all(e.data == "d" * 900 for e in got) and len(got) == 5
    # the sink's side is never limited
    conn, got = _receive(bytes((0x82, 126)) + struct.pack("!H", 5000) + b"e" * 5000, False)
    assert got[0].data == b"e" * 5000


def test_a_message_in_too_many_fragments_is_refused(limits: mitm_limits.Limits) -> None:
    limits.ws_message_bytes = 1 << 20
    n = mitm_limits.MAX_FRAGMENTS + 1
    frames = _client_frame(0x1, b"", fin=False)
    frames += b"".join(_client_frame(0x0, b"", fin=False) for _ in range(n - 2))
    frames += _client_frame(0x0, b"")
    conn, _ = _receive(frames)
    assert len(conn.frame_buf) <= 2  # not a list entry per empty frame
    refused = mitm_limits.refused_message(conn.conn.id)
    assert refused is not None and "fragments" in refused["error"]["message"]


class _Layer:
    """Just what the sweep reads of mitmproxy's Http1Server."""

    read_body = mitm_limits._READ_BODY

    def __init__(self) -> None:
        self.stream_id = 1
        self.buf = b""
        self.conn = tflow.tclient_conn()
        self.state = self.read_body  # a bound method, as mitmproxy stores it


async def test_requests_still_incomplete_at_the_bound_are_closed(
    limits: mitm_limits.Limits, monkeypatch: pytest.MonkeyPatch
) -> None:
    limits.read_timeout_s = 0.2
    closed: list[Any] = []
    monkeypatch.setattr(mitm_limits, "_close_slow", lambda layer, limit: closed.append(layer))
    slow, done, next_request = _Layer(), _Layer(), _Layer()
    tracker = mitm_limits.SlowRequests()
    for layer in (slow, done, next_request):
        tracker.track(layer)
    tracker.track(slow)  # the same request again: timed from its first byte still
    done.state = None  # complete: mitmproxy moved on
    next_request.stream_id = 3  # a later request on the connection, not yet begun
    await asyncio.sleep(0.5)
    assert closed == [slow]
    assert len(tracker) == 0  # and the sweep stopped with nothing left to time
