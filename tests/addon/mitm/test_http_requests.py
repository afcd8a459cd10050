"""``RequestReader`` against mitmproxy's own HTTP/1 reading (h11's framing of
lines, mitmproxy's head parser and body rules): whatever the reader takes,
mitmproxy reads the same way from the same bytes, split anywhere and
pipelined; whatever it does not take, it leaves whole, to the last byte."""

from __future__ import annotations

from h11._receivebuffer import ReceiveBuffer
from hypothesis import example, given, settings
from hypothesis import strategies as st
from mitmproxy.net.http import http1

from addon.mitm.http_requests import HEAD_LIMIT, UNUSUAL, Request, RequestReader
from tests.examples import examples

TOKEN = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_",
    min_size=1,
    max_size=12,
)
VALUE = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=30)
PATH = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789/-._~%?=&", max_size=30)


@st.composite
def plain_post(draw: st.DrawFn) -> bytes:
    body = draw(st.binary(max_size=200))
    names = draw(st.lists(TOKEN, max_size=5))
    headers = [
        (n, draw(VALUE))
        for n in names
        if n.lower()
        not in (
            "content-length",
            "transfer-encoding",
            "expect",
            "upgrade",
            "connection",
            "te",
            "trailer",
            "host",
        )
    ]
    lines = [f"POST /{draw(PATH)} HTTP/1.1", "Host: x", *(f"{k}: {v}" for k, v in headers)]
    if body or draw(st.booleans()):
        lines.append(f"Content-Length: {len(body)}")
    if draw(st.booleans()):
        lines.append("Connection: keep-alive")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def mitmproxy_requests(data: bytes) -> list[tuple[bytes, list[tuple[bytes, bytes]], bytes]] | str:
    """What mitmproxy's HTTP/1 server reads from ``data``, request after
    request: h11's framing of lines (``ReceiveBuffer``), its own head parser
    and body size rules (``Http1Server.read_headers``); a string when it
    refuses one or would not keep the connection."""
    buf = ReceiveBuffer()
    buf += data
    out: list[tuple[bytes, list[tuple[bytes, bytes]], bytes]] = []
    while len(buf):
        lines = buf.maybe_extract_lines()
        if not lines:
            return "no head"
        try:
            request = http1.read_request_head([bytes(x) for x in lines])
            size = http1.expected_http_body_size(request)
        except ValueError as e:
            return f"refused: {e}"
        if size is None or size < 0 or len(buf) < size:
            return "unframed"
        if request.method != "POST" or http1.connection_close(
            request.http_version, request.headers
        ):
            return "not a kept-alive POST"
        body = bytes(buf.maybe_extract_at_most(size) or b"")
        out.append((request.data.path, list(request.headers.fields), body))
    return out


def read_all(chunks: list[bytes], max_body: int = 1 << 20) -> tuple[list[Request], bytes]:
    """Feed ``chunks`` in turn: the requests taken, the bytes left (all of
    them from the first unusual request on)."""
    reader = RequestReader(max_body)
    taken: list[Request] = []
    for i, chunk in enumerate(chunks):
        reader.feed(chunk)
        while True:
            r = reader.peek()
            if r is None:
                break
            if r is UNUSUAL:  # handed back: with every byte still to come
                return taken, bytes(reader.buf) + b"".join(chunks[i + 1 :])
            assert isinstance(r, Request)
            reader.consume(r)
            taken.append(r)
    return taken, bytes(reader.buf)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    return [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]


def same_as_h11(taken: list[Request], data: bytes) -> None:
    consumed = sum(r.size for r in taken)
    expected = mitmproxy_requests(data[:consumed])
    assert not isinstance(expected, str), expected
    assert len(expected) == len(taken)
    for r, (target, headers, body) in zip(taken, expected, strict=True):
        assert r.target == target
        assert r.headers == headers
        assert r.body == body


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(plain_post(), min_size=1, max_size=4), st.lists(st.integers(0, 2000), max_size=6))
def test_plain_posts_split_and_pipelined_read_as_h11_reads_them(
    posts: list[bytes], cuts: list[int]
) -> None:
    data = b"".join(posts)
    taken, rest = read_all(split(data, cuts))
    assert rest == b""
    assert len(taken) == len(posts)
    same_as_h11(taken, data)


@settings(max_examples=examples(500), deadline=None)
@given(
    st.lists(plain_post(), min_size=1, max_size=3),
    st.lists(st.tuples(st.integers(0, 4000), st.binary(min_size=0, max_size=3)), max_size=4),
    st.lists(st.integers(0, 4000), max_size=4),
)
@example(  # found by `make explore`: mitmproxy refuses a Content-Length with a leading zero
    [b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 03\r\nConnection: keep-alive\r\n\r\nabc"],
    [],
    [],
)
def test_mangled_requests_are_taken_as_h11_takes_them_or_left_whole(
    posts: list[bytes], edits: list[tuple[int, bytes]], cuts: list[int]
) -> None:
    data = bytearray(b"".join(posts))
    for at, new in edits:  # overwrite, insert or delete a few bytes anywhere
        at %= len(data) + 1
        data[at : at + len(new) or at + 1] = new
    data_b = bytes(data)
    taken, rest = read_all(split(data_b, cuts))
    assert data_b == data_b[: sum(r.size for r in taken)] + rest  # lossless
    same_as_h11(taken, data_b)


def test_what_is_handed_back() -> None:
    ok = b"POST /rpc/v1/finney HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"
    unusual = [
        b"GET /rpc/v1/finney HTTP/1.1\r\n\r\n",
        b"POST /rpc/v1/finney HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}",
        b"POST /rpc/v1/finney HTTP/1.1\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}",
        b"POST /rpc/v1/finney HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}",
        b"POST /rpc/v1/finney HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        b"POST /rpc/v1/finney HTTP/1.1\r\nUpgrade: h2c\r\nContent-Length: 2\r\n\r\n{}",
        # httptools raises HttpParserUpgrade (no HttpParserError) for these two
        b"POST /rpc/v1/finney HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n"
        b"Content-Length: 2\r\n\r\n{}",
        b"POST /rpc/v1/finney HTTP/1.1\r\nConnection: keep-alive, Upgrade\r\n"
        b"Upgrade: websocket\r\nContent-Length: 2\r\n\r\n{}",
        b"POST /rpc/v1/finney HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
        b"POST /rpc/v1/finney HTTP/1.1\r\nContent-Length: +2\r\n\r\n{}",
        b"POST /rpc/v1/finney HTTP/1.1\r\nContent-Length: 02\r\n\r\n{}",  # mitmproxy: 400
        b"POST /rpc/v1/finney HTTP/1.1\r\nX: a\r\n b\r\nContent-Length: 2\r\n\r\n{}",
        b"POST /rpc/v1/finney HTTP/1.1\nContent-Length: 2\n\n{}",
        b"POST http://x/rpc/v1/finney HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
        b"POST /rpc/v1/finney HTTP/1.1\r\nContent-Length: 11\r\n\r\n" + b"x" * 11,  # > max_body
        b"\r\n" + ok,
    ]
    for data in unusual:
        taken, rest = read_all([ok + data], max_body=10)
        assert len(taken) == 1 and rest == data, data


def test_a_head_past_the_limit_is_handed_back_and_a_shorter_one_waits() -> None:
    head = b"POST / HTTP/1.1\r\nX: " + b"a" * HEAD_LIMIT
    reader = RequestReader(100)
    reader.feed(head[: HEAD_LIMIT - 10])
    assert reader.peek() is None
    reader.feed(head[HEAD_LIMIT - 10 :])
    assert reader.peek() is UNUSUAL


def test_a_head_ended_by_a_bare_lf_is_handed_back_at_once() -> None:
    # h11 takes "\n\r\n" (or "\n\n") as the blank line: mitmproxy answers the
    # head as soon as it has it (a 100 Continue first), so the reader must not
    # wait for a "\r\n\r\n" that would only come with the body
    for end in (b"ab\n\r\n", b"ab\n\n"):
        reader = RequestReader(100)
        reader.feed(b"POST /rpc/v1/finney HTTP/1.1\r\nHost: x\r\nX-Request-Id: " + end)
        assert reader.peek() is UNUSUAL, end
    waiting = RequestReader(100)
    waiting.feed(b"POST /rpc/v1/finney HTTP/1.1\r\nHost: x\r\n")
    assert waiting.peek() is None  # a plain head not ended yet still waits


def test_headers_read_as_mitmproxy_joins_them() -> None:
    reader = RequestReader(100)
    reader.feed(b"POST / HTTP/1.1\r\nX-Forwarded-For: a\r\nx-forwarded-for:  b \r\n\r\n")
    r = reader.peek()
    assert isinstance(r, Request)
    assert r.header("X-Forwarded-For") == "a, b"
    assert r.header("x-request-id") is None
    assert r.path == "/" and r.body == b""
