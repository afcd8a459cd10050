"""``RequestReader`` (pure): a kept-alive client's bytes to whole HTTP/1.1
requests, for the direct HTTP reads (``addon/mitm/http_reads.py``).

It takes only the plainest request an RPC client sends, and nothing it is
unsure of: ``POST <path> HTTP/1.1``, CRLF line ends, no folded headers, no
``Transfer-Encoding``, ``Expect``, ``Upgrade`` nor ``Connection`` other than
``keep-alive``, at most one ``Content-Length`` of digits within the body
limit, a head that httptools (llhttp, strict) parses and within
``HEAD_LIMIT``. Every such request is one mitmproxy parses the same way
(``mitmproxy.net.http.http1.read_request_head``, h11's framing). Anything
else is *unusual*: the caller hands every byte from that request's first on
back to mitmproxy, which answers it as it always has (a 400, the 413, the
431, a WebSocket upgrade, a chunked body, a sidecar path...).

``peek`` looks at the front of the buffer: a whole ``Request`` (not yet
consumed: ``consume`` it once taken, or hand ``buf`` back), ``None`` (not
whole yet: more bytes needed) or ``UNUSUAL``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

import httptools
from mitmproxy.net.http.validate import parse_content_length

HEAD_LIMIT = 65536  # as addon/mitm/limits.py: a longer head is mitmproxy's 431
_PREFIX = b"POST /"
_REFUSED_HEADERS = frozenset((b"transfer-encoding", b"expect", b"upgrade", b"te", b"trailer"))
_MAX_LENGTH_DIGITS = 12
_LENIENT_END = re.compile(rb"\n\r?\n")  # h11's blank line (``ReceiveBuffer``)


def head_too_large(data: bytes) -> bool:
    """Whether the request head ``data`` begins with is longer than
    ``HEAD_LIMIT``, ended (at h11's blank line) or not ended within it."""
    end = _LENIENT_END.search(data, 0, HEAD_LIMIT + 2)
    return end is None or end.end() > HEAD_LIMIT


class _Unusual:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNUSUAL"


UNUSUAL: Final = _Unusual()


@dataclass(slots=True)
class Request:
    """One whole request, as mitmproxy would have parsed it."""

    target: bytes  # the request target (origin form: it starts with "/")
    headers: list[tuple[bytes, bytes]]  # names and values as sent (values stripped)
    body: bytes
    size: int  # bytes of the buffer it took (head and body)

    @property
    def path(self) -> str:
        """As ``mitmproxy.http.Request.path`` decodes it."""
        return self.target.decode("utf-8", "surrogateescape")

    def header(self, name: str) -> str | None:
        """``mitmproxy.http.Headers.get``: every value of ``name`` (any case),
        joined by ", "; None when absent."""
        key = name.lower().encode()
        values = [v.decode("utf-8", "surrogateescape") for k, v in self.headers if k.lower() == key]
        return ", ".join(values) if values else None


class _Head:
    """httptools' callbacks for one head."""

    __slots__ = ("done", "headers", "url")

    def __init__(self) -> None:
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.done = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.done = True


def parse_head(head: bytes) -> tuple[bytes, list[tuple[bytes, bytes]]] | None:
    """The target and headers of a plain keep-alive ``POST`` head (it ends
    with its blank line), or None when it is anything else."""
    if head.count(b"\n") != head.count(b"\r\n") or head.count(b"\r") != head.count(b"\r\n"):
        return None  # bare CR or LF: h11 splits such lines otherwise
    if b"\r\n " in head or b"\r\n\t" in head:
        return None  # obs-fold
    cb = _Head()
    parser = httptools.HttpRequestParser(cb)
    try:
        parser.feed_data(head)
    except (httptools.HttpParserError, httptools.HttpParserUpgrade):
        # (``HttpParserUpgrade`` is no ``HttpParserError``: a POST with
        # ``Connection: Upgrade`` and ``Upgrade`` raises it, mitmproxy's to answer)
        return None
    if not cb.done or parser.get_method() != b"POST" or parser.get_http_version() != "1.1":
        return None
    if not parser.should_keep_alive() or not cb.url.startswith(b"/"):
        return None
    headers = []
    for name, value in cb.headers:
        key = name.lower()
        if key in _REFUSED_HEADERS:
            return None
        if key == b"connection" and value.strip().lower() != b"keep-alive":
            return None
        headers.append((name, value.strip()))
    return cb.url, headers


def asks_close(connection: str | None) -> bool:
    """A ``Connection`` header value that names ``close``, in any case (RFC
    9110 7.6.1: its options are case-insensitive; mitmproxy's check is not)."""
    return connection is not None and any(
        token.strip().lower() == "close" for token in connection.split(",")
    )


def content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The body's length (0 without the header), or None when unusual
    (repeated, too long, or what mitmproxy's own check refuses with a 400,
    e.g. ``+2`` or a leading zero's ``03``)."""
    values = [v for k, v in headers if k.lower() == b"content-length"]
    if not values:
        return 0
    if len(values) > 1 or len(values[0]) > _MAX_LENGTH_DIGITS:
        return None
    try:
        return parse_content_length(values[0])
    except ValueError:
        return None


class RequestReader:
    """A connection's bytes not yet taken; the requests at their front."""

    __slots__ = ("buf", "max_body")

    def __init__(self, max_body: int) -> None:
        self.buf = bytearray()
        self.max_body = max_body  # a longer body is mitmproxy's (its JSON 413)

    def feed(self, data: bytes) -> None:
        self.buf += data

    def peek(self) -> Request | _Unusual | None:
        buf = self.buf
        n = len(buf)
        if n < len(_PREFIX):
            return None if _PREFIX.startswith(buf) else UNUSUAL
        if not buf.startswith(_PREFIX):
            return UNUSUAL
        end = buf.find(b"\r\n\r\n", 0, HEAD_LIMIT + 4)
        if end < 0:
            if _LENIENT_END.search(buf, 0, HEAD_LIMIT + 4):
                # h11 ends a head at a bare LF's blank line too: mitmproxy
                # answers it now (its 100 Continue, its 400), not once more bytes come
                return UNUSUAL
            # a head past the limit gets mitmproxy's 431
            return UNUSUAL if n > HEAD_LIMIT else None
        head_size = end + 4
        if head_size > HEAD_LIMIT:
            return UNUSUAL  # mitmproxy's 431
        parsed = parse_head(bytes(buf[:head_size]))
        if parsed is None:
            return UNUSUAL
        target, headers = parsed
        length = content_length(headers)
        if length is None or length > self.max_body:
            return UNUSUAL
        size = head_size + length
        if n < size:
            return None
        return Request(target, headers, bytes(buf[head_size:size]), size)

    def consume(self, request: Request) -> None:
        del self.buf[: request.size]
