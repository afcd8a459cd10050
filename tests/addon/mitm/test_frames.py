"""The direct reads' frame reader (addon/mitm/frames.py) against wsproto,
the parser mitmproxy's WebSocket layer uses: whatever bytes a client sends,
the reader's messages followed by what wsproto makes of the bytes it hands
back are exactly what wsproto makes of them all. So a socket read directly
behaves as one read by mitmproxy, however its frames are split."""

from __future__ import annotations

import os
import struct
from typing import Any

import wsproto
import wsproto.events
from hypothesis import given, settings
from hypothesis import strategies as st

from addon.mitm.frames import (
    BINARY,
    PING,
    PONG,
    TEXT,
    FrameReader,
    ping_frame,
    pong_frame,
    unmask,
)
from tests.examples import examples

LIMIT = 4096


def frame(
    opcode: int,
    payload: bytes,
    *,
    fin: bool = True,
    rsv: int = 0,
    masked: bool = True,
    long_form: int = 0,
    key: bytes | None = None,
) -> bytes:
    """A client frame; ``long_form`` 2 or 8: that many length bytes whatever the size."""
    first = (0x80 if fin else 0) | (rsv << 4) | opcode
    n = len(payload)
    bit = 0x80 if masked else 0
    if long_form == 8 or (not long_form and n >= 65536):
        head = bytes((first, bit | 127)) + struct.pack("!Q", n)
    elif long_form == 2 or (not long_form and n >= 126):
        head = bytes((first, bit | 126)) + struct.pack("!H", n)
    else:
        head = bytes((first, bit | n))
    if not masked:
        return head + payload
    key = key if key is not None else os.urandom(4)
    return head + key + unmask(payload, key)  # masking is its own inverse


def wsproto_events(data: bytes) -> list[tuple[str, Any]]:
    """What mitmproxy's parser makes of ``data`` (a server's side): messages
    (whole ones only: a fragment shows as its pieces), pings, pongs, a close."""
    conn = wsproto.Connection(wsproto.ConnectionType.SERVER)
    conn.receive_data(data)
    out: list[tuple[str, Any]] = []
    for ev in conn.events():
        if isinstance(ev, wsproto.events.TextMessage):
            out.append(("text", ev.data.encode(), ev.frame_finished, ev.message_finished))
        elif isinstance(ev, wsproto.events.BytesMessage):
            out.append(("binary", bytes(ev.data), ev.frame_finished, ev.message_finished))
        elif isinstance(ev, wsproto.events.Ping):
            out.append(("ping", bytes(ev.payload)))
        elif isinstance(ev, wsproto.events.Pong):
            out.append(("pong", bytes(ev.payload)))
        elif isinstance(ev, wsproto.events.CloseConnection):
            out.append(("close", ev.code))
            break
    return out


def ours(messages: list[tuple[int, bytes]]) -> list[tuple[str, Any]]:
    names = {TEXT: "text", BINARY: "binary", PING: "ping", PONG: "pong"}
    out: list[tuple[str, Any]] = []
    for op, payload in messages:
        if op in (TEXT, BINARY):
            out.append((names[op], payload, True, True))
        else:
            out.append((names[op], payload))
    return out


def read(data: bytes, cuts: list[int], limit: int = LIMIT) -> tuple[list[Any], bytes | None]:
    reader = FrameReader(limit)
    got: list[tuple[int, bytes]] = []
    at = 0
    for cut in sorted({*cuts, len(data)}):
        got += reader.feed(data[at:cut])
        at = cut
    return ours(got), reader.handover


def test_a_text_message_a_ping_and_a_pong() -> None:
    data = frame(TEXT, b'{"id":1}') + frame(PING, b"hi") + frame(PONG, b"") + frame(BINARY, b"\x00")
    assert read(data, []) == (
        [
            ("text", b'{"id":1}', True, True),
            ("ping", b"hi"),
            ("pong", b""),
            ("binary", b"\x00", True, True),
        ],
        None,
    )


def test_a_frame_arriving_a_byte_at_a_time() -> None:
    body = b'{"jsonrpc":"2.0","id":7,"method":"system_health"}' * 5  # a 16-bit length
    data = frame(TEXT, body)
    got, handover = read(data, list(range(len(data))))
    assert got == [("text", body, True, True)] and handover is None


def test_a_close_is_handed_back_with_everything_after_it() -> None:
    close = frame(0x8, struct.pack("!H", 1000))
    after = frame(TEXT, b"late")
    got, handover = read(frame(TEXT, b"a") + close + after, [])
    assert got == [("text", b"a", True, True)]
    assert handover == close + after


def test_each_frame_it_does_not_take_is_handed_back_from_its_first_byte() -> None:
    cases = {
        "fragment": frame(TEXT, b"ab", fin=False) + frame(0, b"cd"),
        "reserved bit": frame(TEXT, b"x", rsv=4),
        "unmasked": frame(TEXT, b"x", masked=False),
        "reserved opcode": frame(0x3, b""),
        "16-bit length for 5 bytes": frame(TEXT, b"12345", long_form=2),
        "64-bit length for 5 bytes": frame(TEXT, b"12345", long_form=8),
        "over the limit": frame(TEXT, b"x" * (LIMIT + 1)),
        "long ping": frame(PING, b"p" * 126),
        "not UTF-8": frame(TEXT, b"\xff\xfe"),
    }
    for what, bad in cases.items():
        got, handover = read(frame(TEXT, b"ok") + bad, [])
        assert got == [("text", b"ok", True, True)], what
        assert handover == bad, what


def test_an_over_the_limit_frame_is_handed_back_before_its_payload_arrives() -> None:
    reader = FrameReader(LIMIT)
    head = frame(BINARY, b"x" * 100_000)[:14]
    assert reader.feed(head) == [] and reader.handover == head
    assert reader.feed(b"more") == [] and reader.handover == head + b"more"


def test_pong_frame() -> None:
    assert pong_frame(b"abc") == b"\x8a\x03abc"
    assert wsproto_events(b"\x8a\x80\x00\x00\x00\x00") == [("pong", b"")]


def test_ping_frame_is_a_servers_ping_to_a_client() -> None:
    assert ping_frame(b"7") == b"\x89\x017"
    client = wsproto.Connection(wsproto.ConnectionType.CLIENT)
    client.receive_data(ping_frame(b"12"))
    (event,) = list(client.events())
    assert isinstance(event, wsproto.events.Ping) and bytes(event.payload) == b"12"


# --- against wsproto, whatever the client sends -----------------------------------------

payloads = st.binary(max_size=300) | st.text(max_size=80).map(str.encode)
frames = st.builds(
    frame,
    st.sampled_from([TEXT, TEXT, TEXT, BINARY, PING, PONG, 0x0, 0x3, 0x8]),
    payloads,
    fin=st.booleans() | st.just(True),
    rsv=st.sampled_from([0, 0, 0, 0, 1, 4]),
    masked=st.booleans() | st.just(True) | st.just(True),
    long_form=st.sampled_from([0, 0, 0, 0, 2, 8]),
)


@settings(max_examples=examples(600), deadline=None)
@given(st.lists(frames, max_size=8), st.lists(st.integers(0, 4000), max_size=6))
def test_read_directly_then_handed_back_is_what_wsproto_makes_of_it_all(
    wire: list[bytes], cuts: list[int]
) -> None:
    data = b"".join(wire)
    got, handover = read(data, [c for c in cuts if c <= len(data)], limit=256)
    expected = wsproto_events(data)
    rest = wsproto_events(handover) if handover is not None else []
    assert got + rest == expected
