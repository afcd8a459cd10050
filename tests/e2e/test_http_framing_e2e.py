"""HTTP/1.1 framing a client may send, answered as RFC 9112 says, in every
dispatch mode: on a connection's first request (always mitmproxy's HTTP
layer) and on a kept-alive one (read by chainproxy itself, then handed back
to mitmproxy for the unusual request; with direct reads off, mitmproxy's).

Found by the differential sweep of direct reads on and off (2026-11-30):

* a head of 32 to 64 KiB whose first read lacks its end got a 431 (the read was
  counted twice), and a head of exactly 64 KiB always did;
* an empty line before a request line left the request unanswered until the
  read timeout's 408 (h11 drops one empty line, then waits for more bytes);
* ``Connection: CLOSE`` (not lower case) left the connection open;
* a chunk size that is no number closed the connection with no answer.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.e2e.harness import Stack
from tests.e2e.test_slow_clients_e2e import BODY, assert_json_error, head, parse, port_of
from tests.e2e.test_slow_clients_e2e import read_answer as answer_of

pytestmark = pytest.mark.e2e


@contextmanager
def connection(stack: Stack, client: int, *, warm: bool) -> Iterator[socket.socket]:
    """A socket from 127.0.43.<client> (its own quota); ``warm``: one plain
    call answered first, so the next request is read by chainproxy itself
    where direct reads are on."""
    with socket.create_connection(
        ("127.0.0.1", port_of(stack)), timeout=15, source_address=(f"127.0.43.{client}", 0)
    ) as s:
        if warm:
            s.sendall(head(len(BODY)) + BODY)
            assert parse(answer_of(s))[0] == 200
        yield s


def closed(s: socket.socket, within_s: float = 10) -> bool:
    s.settimeout(within_s)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


@pytest.mark.parametrize("warm", [False, True], ids=["first", "kept-alive"])
@pytest.mark.parametrize(("size", "first"), [(40_000, 35_000), (65_536, 65_535)])
def test_a_head_within_64_kib_sent_in_large_pieces_is_answered(
    mode_stack: Stack, warm: bool, size: int, first: int
) -> None:
    start = head(len(BODY))[:-2]  # up to the blank line
    pad = b"X-Pad: " + b"a" * (size - len(start) - len(b"X-Pad: \r\n\r\n")) + b"\r\n\r\n"
    request = start + pad
    assert len(request) == size
    with connection(mode_stack, 1 + warm, warm=warm) as s:
        s.sendall(request[:first])
        time.sleep(0.3)  # two reads on the proxy's side
        s.sendall(request[first:] + BODY)
        status, _, doc = parse(answer_of(s))
    assert status == 200 and doc["result"] is not None, doc


@pytest.mark.parametrize("warm", [False, True], ids=["first", "kept-alive"])
@pytest.mark.parametrize("lines", [b"\r\n", b"\r\n\r\n"], ids=["one", "two"])
def test_empty_lines_before_a_request_line_are_ignored(
    mode_stack: Stack, warm: bool, lines: bytes
) -> None:
    with connection(mode_stack, 3 + warm, warm=warm) as s:
        s.sendall(lines + head(len(BODY)) + BODY)
        s.settimeout(10)  # well under the read timeout's 408
        status, _, doc = parse(answer_of(s))
        assert status == 200 and doc["result"] is not None, doc
        # and after a body (some old clients end a POST with an extra CRLF)
        s.sendall(head(len(BODY)) + BODY + b"\r\n" + head(len(BODY)) + BODY)
        assert parse(answer_of(s))[0] == 200
        assert parse(answer_of(s))[0] == 200


@pytest.mark.parametrize("warm", [False, True], ids=["first", "kept-alive"])
@pytest.mark.parametrize("value", ["CLOSE", "Close", "keep-alive, Close"])
def test_connection_close_in_any_case_closes_after_the_answer(
    mode_stack: Stack, warm: bool, value: str
) -> None:
    request = head(len(BODY)).replace(b"\r\n\r\n", f"\r\nConnection: {value}\r\n\r\n".encode())
    with connection(mode_stack, 5 + warm, warm=warm) as s:
        s.sendall(request + BODY)
        status, headers, _ = parse(answer_of(s))
        assert status == 200 and headers["connection"].lower() == "close", headers
        assert closed(s), "the connection was left open"


@pytest.mark.parametrize("warm", [False, True], ids=["first", "kept-alive"])
def test_a_chunk_size_that_is_no_number_gets_a_json_400_and_is_closed(
    mode_stack: Stack, warm: bool
) -> None:
    with connection(mode_stack, 7 + warm, warm=warm) as s:
        s.sendall(head(chunked=True) + b"zz\r\n" + BODY + b"\r\n0\r\n\r\n")
        doc = assert_json_error(answer_of(s), 400)
        assert doc["error"]["data"]["policy"] == "request", doc
        assert "framing" in doc["error"]["message"], doc
        assert closed(s), "the connection was left open"


@pytest.mark.parametrize("sent", [None, "ws-handshake-1"])
def test_the_websocket_handshake_answer_carries_a_request_id(
    mode_stack: Stack, sent: str | None
) -> None:
    """Every answer carries ``X-Request-Id`` (USING, Headers): the 101 too,
    which comes from the proxy's own WebSocket sink (aiohttp), whose
    ``Server`` name it no longer carries."""
    own = f"X-Request-Id: {sent}\r\n" if sent else ""
    upgrade = (
        "GET /rpc/v1/finney HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{own}\r\n"
    ).encode()
    with connection(mode_stack, 9, warm=False) as s:
        s.sendall(upgrade)
        raw = b""
        while b"\r\n\r\n" not in raw:
            chunk = s.recv(4096)
            assert chunk, raw
            raw += chunk
    status, headers, _ = parse(raw)
    assert status == 101, raw
    assert "server" not in headers, headers
    if sent:
        assert headers["x-request-id"] == sent, headers
    else:
        assert len(headers["x-request-id"]) == 16, headers
