"""The benchmarks' WebSocket framing: what the trivial upstream and the load
client exchange must be what a real peer (mitmproxy, aiohttp) reads."""

from __future__ import annotations

import os

import pytest

from bench import wsframe


def test_accept_key_is_rfc_6455s_example() -> None:
    assert wsframe.accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


@pytest.mark.parametrize("n", [0, 5, 125, 126, 65_535, 65_536, 70_000])
@pytest.mark.parametrize("mask", [None, wsframe.ZERO_MASK, b"\x01\x02\x03\x04"])
def test_a_frame_parses_back_to_its_message_at_every_length(n: int, mask: bytes | None) -> None:
    payload = os.urandom(n)
    assert wsframe.Parser().feed(wsframe.frame(payload, mask=mask)) == [(wsframe.TEXT, payload)]


def test_messages_split_anywhere_come_out_whole_and_in_order() -> None:
    msgs = [b'{"id":%d}' % i for i in range(50)] + [b"x" * 300]
    data = b"".join(wsframe.frame(m, mask=b"\x09\x08\x07\x06") for m in msgs)
    p = wsframe.Parser()
    out = []
    for i in range(0, len(data), 7):
        out += p.feed(data[i : i + 7])
    assert [m for _, m in out] == msgs
    assert not p.buf


def test_fragments_are_joined_and_control_frames_pass_between_them() -> None:
    first = b"\x01\x03abc"  # text, not final
    ping = wsframe.frame(b"hi", wsframe.PING)
    last = b"\x80\x02de"  # continuation, final
    assert wsframe.Parser().feed(first + ping + last) == [
        (wsframe.PING, b"hi"),
        (wsframe.TEXT, b"abcde"),
    ]


def test_unmask_is_its_own_inverse() -> None:
    data = os.urandom(1001)
    key = b"\xaa\x55\x0f\xf0"
    assert wsframe.unmask(wsframe.unmask(data, key), key) == data
    assert wsframe.unmask(data, wsframe.ZERO_MASK) is data
