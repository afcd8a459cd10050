"""The read limits patched into mitmproxy (addon/mitm/limits.py): every
internal they rely on is where they expect it, each limit does what it says on
mitmproxy's own objects, and the addon owning them takes its patches out again
on ``done`` (a script reload). End to end: tests/e2e/test_slow_clients_e2e.py
and tests/e2e/test_ws_fuzz_e2e.py."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import struct
from collections.abc import Iterator
from typing import Any

import pytest
import wsproto
import wsproto.events
from mitmproxy.proxy import events, server
from mitmproxy.proxy.context import Context
from mitmproxy.proxy.layers import websocket as mitm_ws
from mitmproxy.proxy.layers.http import _http1
from mitmproxy.test import taddons, tflow

from addon.mitm import limits as mitm_limits
from addon.mitm import slow_requests
from addon.mitm.limits import Limits, ReadLimits
from addon.mitm.ws_limits import MAX_FRAGMENTS

# mitmproxy's own functions, as found when this module is imported (importing
# addon/mitm/limits.py patches nothing: a ReadLimits does, when loaded)
_MITMPROXYS = {
    "read_headers": _http1.Http1Server.__dict__["read_headers"],
    "make_error_response": _http1.__dict__["make_error_response"],
    "handle_connection": server.ConnectionHandler.__dict__["handle_connection"],
}


@pytest.fixture
def owner() -> Iterator[ReadLimits]:
    """A ``ReadLimits`` loaded as mitmproxy loads it, and done afterwards."""
    limits = ReadLimits()
    limits.install()
    assert limits.installed
    yield limits
    limits.uninstall()


def _mitmproxys_own() -> bool:
    """Every patched place holds mitmproxy's own function again."""
    return (
        _http1.Http1Server.read_headers.__module__ == _http1.__name__
        and _http1.make_error_response.__module__ == _http1.__name__
        and server.ConnectionHandler.handle_connection.__module__ == server.__name__
        and "events" not in vars(mitm_ws.WebsocketConnection)  # wsproto's, inherited
        and mitm_ws.WebsocketConnection.events is wsproto.Connection.events
    )


def _owned_by(limits: ReadLimits) -> bool:
    """Every patched place holds ``limits``'s own function."""
    return limits.installed and all(
        vars(where)[name] is fn for (where, name), fn in limits._patches.items()
    )


def test_every_internal_the_limits_patch_is_there() -> None:
    assert [name for name, ok in mitm_limits._assumptions() if not ok] == []
    assert all(fn.__module__ in (_http1.__name__, server.__name__) for fn in _MITMPROXYS.values())


def test_install_patches_once_and_takes_new_values(owner: ReadLimits) -> None:
    patches = dict(owner._patches)
    assert owner.install(Limits(1000, 7.0, 2000)) is True
    limits = owner.limits
    assert (limits.body_bytes, limits.read_timeout_s, limits.ws_message_bytes) == (1000, 7.0, 2000)
    assert _owned_by(owner) and not _mitmproxys_own()
    assert owner.slow.limits is limits  # the slow-request sweep reads the same limits
    assert owner.install(Limits(5, 1.0, 6)) is True  # a config reload: values only
    assert limits.body_bytes == 5 and owner._patches == patches and _owned_by(owner)


def test_done_puts_mitmproxys_functions_back_and_a_new_load_reinstalls() -> None:
    first = ReadLimits()
    first.install()
    assert _owned_by(first)
    first.uninstall()  # a script reload: the old addons get ``done`` ...
    assert _mitmproxys_own() and not first.installed
    assert _http1.Http1Server.read_headers is _MITMPROXYS["read_headers"]
    assert _http1.make_error_response is _MITMPROXYS["make_error_response"]
    assert server.ConnectionHandler.handle_connection is _MITMPROXYS["handle_connection"]
    second = ReadLimits()  # ... and the new ones ``load``
    second.install()
    assert _owned_by(second)
    assert not set(first._patches.values()) & set(second._patches.values())
    second.uninstall()
    assert _mitmproxys_own()


def test_reloads_never_stack_patches() -> None:
    owners = [ReadLimits() for _ in range(3)]
    owners[0].install()
    for old, new in itertools.pairwise(owners):  # two reloads: done, then the new load
        old.uninstall()
        new.install()
        assert _owned_by(new)
    owners[-1].uninstall()  # one done is enough: nothing of an older one underneath
    assert _mitmproxys_own()
    # an old instance whose done never came is replaced, not wrapped; its late
    # done leaves the newer instance's patches alone
    stale, current = ReadLimits(), ReadLimits()
    stale.install()
    current.install()
    assert _owned_by(current)
    stale.uninstall()
    assert _owned_by(current)
    current.uninstall()
    assert _mitmproxys_own()


def test_a_failed_install_patches_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mitm_limits, "_assumptions", lambda: [("X.y", False)])
    places = list(mitm_limits._ORIGINALS)
    before = [vars(where).get(name) for where, name in places]
    limits = ReadLimits()
    assert limits.install(Limits(9, 1.0, 9)) is False and limits.limits.body_bytes == 9
    assert not limits.installed
    limits.uninstall()  # nothing to take out
    assert [vars(where).get(name) for where, name in places] == before


def test_a_head_past_the_limit_gets_431_on_mitmproxys_own_layer(owner: ReadLimits) -> None:
    with taddons.context() as tctx:
        context = Context(tflow.tclient_conn(), tctx.options)
        layer = _http1.Http1Server(context)
        assert list(layer.handle_event(events.Start())) == []
        head = b"GET / HTTP/1.1\r\nX-Big: " + b"a" * mitm_limits.HEAD_LIMIT
        sent = list(layer.handle_event(events.DataReceived(context.client, head)))
    assert [type(c).__name__ for c in sent] == ["SendData", "CloseConnection"]
    status, _, doc = _answer(sent[0].data)
    assert status == 431 and doc["error"]["data"] == {"limit": mitm_limits.HEAD_LIMIT}


@pytest.mark.parametrize("size", [65_600, 100_000, 127_000])
@pytest.mark.parametrize("split", [False, True])
def test_a_head_past_the_limit_that_ends_in_the_same_read_gets_431(
    owner: ReadLimits, size: int, split: bool
) -> None:
    """mitmproxy takes any head that ends in the read that crosses the limit."""
    with taddons.context() as tctx:
        context = Context(tflow.tclient_conn(), tctx.options)
        layer = _http1.Http1Server(context)
        assert list(layer.handle_event(events.Start())) == []
        head = b"POST /rpc/v1/finney HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * size
        head += b"\r\nContent-Length: 2\r\n\r\n{}"
        sent: list[Any] = []
        for part in (head[:30_000], head[30_000:]) if split else (head,):
            sent += layer.handle_event(events.DataReceived(context.client, part))
    assert [type(c).__name__ for c in sent] == ["SendData", "CloseConnection"]
    status, headers, _ = _answer(sent[0].data)
    assert status == 431 and len(headers["x-request-id"]) == 16  # a complaint can quote it


def test_a_head_just_within_the_limit_is_mitmproxys(owner: ReadLimits) -> None:
    with taddons.context() as tctx:
        context = Context(tflow.tclient_conn(), tctx.options)
        layer = _http1.Http1Server(context)
        assert list(layer.handle_event(events.Start())) == []
        start = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: "
        head = start + b"a" * (mitm_limits.HEAD_LIMIT - len(start) - 4) + b"\r\n\r\n"
        assert len(head) == mitm_limits.HEAD_LIMIT
        sent = list(layer.handle_event(events.DataReceived(context.client, head)))
    assert "SendData" not in [type(c).__name__ for c in sent]  # a request, to the hooks


def _server(tctx: Any) -> tuple[Context, _http1.Http1Server]:
    context = Context(tflow.tclient_conn(), tctx.options)
    layer = _http1.Http1Server(context)
    assert list(layer.handle_event(events.Start())) == []
    return context, layer


@pytest.mark.parametrize(
    ("size", "first"), [(34_000, 32_800), (40_000, 35_000), (65_536, 65_535), (65_536, 65_000)]
)
def test_a_head_within_the_limit_in_large_reads_is_mitmproxys(
    owner: ReadLimits, size: int, first: int
) -> None:
    """Was: the read just received was counted twice (mitmproxy has put it in
    the layer's buffer before its state reads it), so a head of 32 KiB or more
    without its end in one read got the 431, as did every head of 64 KiB."""
    start = b"POST /rpc/v1/finney HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nX-Big: "
    head = start + b"a" * (size - len(start) - 4) + b"\r\n\r\n"
    assert len(head) == size
    with taddons.context() as tctx:
        context, layer = _server(tctx)
        sent: list[Any] = []
        for part in (head[:first], head[first:] + b"{}"):
            sent += layer.handle_event(events.DataReceived(context.client, part))
    names = [type(c).__name__ for c in sent]
    assert "SendData" not in names and "CloseConnection" not in names, names
    assert getattr(layer.state, "__name__", "") != "read_headers"  # the head was read


@pytest.mark.parametrize("lines", [b"\r\n", b"\r\n\r\n", b"\n"])
def test_empty_lines_before_a_request_line_are_ignored(owner: ReadLimits, lines: bytes) -> None:
    """h11 took one empty line and waited for bytes that never came (the
    request, whole in its buffer, answered by the read timeout's 408)."""
    request = b"POST /rpc/v1/finney HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
    with taddons.context() as tctx:
        context, layer = _server(tctx)
        sent = list(layer.handle_event(events.DataReceived(context.client, lines + request)))
    kinds = [type(getattr(c, "event", None)).__name__ for c in sent]
    assert kinds[0] == "RequestHeaders" and "RequestEndOfMessage" in kinds, kinds
    assert layer.request is not None and layer.request.path == "/rpc/v1/finney"


def test_a_chunk_size_that_is_no_number_gets_the_json_400_then_the_close(
    owner: ReadLimits,
) -> None:
    """mitmproxy closed the connection and sent nothing."""
    head = b"POST /rpc/v1/finney HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    with taddons.context() as tctx:
        context, layer = _server(tctx)
        sent = list(layer.handle_event(events.DataReceived(context.client, head + b"zz\r\n")))
    names = [type(c).__name__ for c in sent]
    at = names.index("SendData")
    assert names[at + 1] == "CloseConnection", names
    assert type(sent[-1].event).__name__ == "RequestProtocolError"  # the flow still learns it
    status, _, doc = _answer(sent[at].data)
    assert status == 400 and doc["error"]["data"]["policy"] == "request"
    assert "framing" in doc["error"]["message"]


def _answer(raw: bytes) -> tuple[int, dict[str, str], Any]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    return int(lines[0].split()[1]), headers, json.loads(body)


def test_mitmproxys_413_page_becomes_the_contract_json(owner: ReadLimits) -> None:
    owner.limits.body_bytes = 4096
    status, headers, doc = _answer(_http1.make_error_response(413, "too large"))
    assert status == 413 and headers["content-type"] == "application/json"
    assert headers["connection"] == "close" and headers["access-control-allow-origin"] == "*"
    assert doc["id"] is None and doc["error"]["code"] == -32600
    assert doc["error"]["data"] == {"limit": 4096} and "4096" in doc["error"]["message"]
    # mitmproxy's other refusals (a malformed request, CONNECT in reverse
    # mode) are the contract's JSON too, not its HTML page
    status, headers, doc = _answer(_http1.make_error_response(400, "Invalid request form"))
    assert status == 400 and headers["content-type"] == "application/json"
    assert doc["error"]["data"] == {"policy": "request", "reason": "Invalid request form"}
    assert len(headers["x-request-id"]) == 16
    # its 502 (a connection of its own that failed) is the proxy's fault: -32603, no policy
    status, _, doc = _answer(_http1.make_error_response(502, "connection failed"))
    assert status == 502 and doc["error"]["code"] == -32603 and "data" not in doc["error"]


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
    owner: ReadLimits,
) -> None:
    owner.limits.ws_message_bytes = 1000
    conn, ok = _receive(_client_frame(0x1, b"a" * 1000))
    assert [e.data for e in ok] == ["a" * 1000]
    assert owner.refused_message(conn.conn.id) is None
    # fragments count together; past the limit the pieces come empty
    frames = _client_frame(0x2, b"b" * 600, fin=False) + _client_frame(0x0, b"b" * 600)
    frames += _client_frame(0x1, b"{}")
    conn, got = _receive(frames)
    assert [e.data for e in got] == [b"b" * 600, b"", "{}"]
    refused = owner.refused_message(conn.conn.id)
    assert refused is not None and refused["error"]["code"] == -32600
    assert refused["error"]["message"] == "body too large: 1200 bytes, the limit is 1000"
    assert refused["error"]["data"] == {"limit": 1000} and refused["id"] is None
    assert owner.refused_message(conn.conn.id) is None  # once per message
    # what mitmproxy gathered of it was dropped
    conn, got = _receive(_client_frame(0x1, b"c" * 900, fin=False) + _client_frame(0x0, b"c" * 900))
    assert conn.frame_buf == [b""] and owner.refused_message(conn.conn.id) is not None
    # a finished message starts the count again
    conn, got = _receive(b"".join(_client_frame(0x1, b"d" * 900) for _ in range(5)))
    assert all(e.data == "d" * 900 for e in got) and len(got) == 5
    # the sink's side is never limited
    conn, got = _receive(bytes((0x82, 126)) + struct.pack("!H", 5000) + b"e" * 5000, False)
    assert got[0].data == b"e" * 5000


def test_a_message_in_too_many_fragments_is_refused(owner: ReadLimits) -> None:
    owner.limits.ws_message_bytes = 1 << 20
    n = MAX_FRAGMENTS + 1
    frames = _client_frame(0x1, b"", fin=False)
    frames += b"".join(_client_frame(0x0, b"", fin=False) for _ in range(n - 2))
    frames += _client_frame(0x0, b"")
    conn, _ = _receive(frames)
    assert len(conn.frame_buf) <= 2  # not a list entry per empty frame
    refused = owner.refused_message(conn.conn.id)
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
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    limits = Limits(read_timeout_s=0.2)
    closed: list[Any] = []
    monkeypatch.setattr(slow_requests, "_close_slow", lambda layer, limit: closed.append(layer))
    slow, done, next_request = _Layer(), _Layer(), _Layer()
    tracker = slow_requests.SlowRequests(limits)
    for layer in (slow, done, next_request):
        tracker.track(layer)
    tracker.track(slow)  # the same request again: timed from its first byte still
    done.state = None  # complete: mitmproxy moved on
    next_request.stream_id = 3  # a later request on the connection, not yet begun
    await asyncio.sleep(0.5)
    assert closed == [slow]
    assert len(tracker) == 0  # and the sweep stopped with nothing left to time
