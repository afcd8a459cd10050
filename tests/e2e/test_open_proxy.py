"""The proxy is never an open proxy: whatever the request line or Host header
says, it talks only to the configured upstreams and the sidecar. A canary
server on another loopback port must never see a connection."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator

import pytest

from tests.e2e.harness import Stack, free_port

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(mode_stack: Stack) -> Stack:
    """Every test here runs under each dispatch mode (default, lean, mitmproxy's)."""
    return mode_stack


class Canary:
    def __init__(self) -> None:
        self.port = free_port()
        self.hits = 0
        self._sock = socket.create_server(("127.0.0.1", self.port))
        self._sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            self.hits += 1
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\ncanary")
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._sock.close()


@pytest.fixture
def canary() -> Iterator[Canary]:
    c = Canary()
    yield c
    c.close()


def raw_request(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        chunks = []
        while True:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            chunks.append(chunk)
            if b"\r\n\r\n" in b"".join(chunks):
                head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
                length = [
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ]
                if length and len(body) >= length[0]:
                    break
        return b"".join(chunks)


def _port(stack: Stack) -> int:
    return int(stack.proxy_url.rsplit(":", 1)[1])


RPC = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "system_health", "params": []}).encode()


def test_absolute_form_request_to_another_host_never_reaches_it(
    stack: Stack, canary: Canary
) -> None:
    target = f"http://127.0.0.1:{canary.port}"
    for req in (
        f"GET {target}/secret HTTP/1.1\r\nHost: 127.0.0.1:{canary.port}\r\n\r\n".encode(),
        f"POST {target}/rpc/v1/finney HTTP/1.1\r\nHost: 127.0.0.1:{canary.port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(RPC)}\r\n\r\n".encode()
        + RPC,
    ):
        reply = raw_request(_port(stack), req)
        assert b"canary" not in reply
    assert canary.hits == 0


def test_foreign_host_header_stays_on_the_configured_route(stack: Stack, canary: Canary) -> None:
    reply = raw_request(
        _port(stack),
        f"POST /rpc/v1/finney HTTP/1.1\r\nHost: 127.0.0.1:{canary.port}\r\n"
        f"X-Forwarded-Host: 127.0.0.1:{canary.port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(RPC)}\r\n\r\n".encode()
        + RPC,
    )
    assert reply.startswith(b"HTTP/1.1 200") and b'"peers":8' in reply
    reply = raw_request(
        _port(stack), f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{canary.port}\r\n\r\n".encode()
    )
    assert reply.startswith(b"HTTP/1.1 200") and b'"status": "ok"' in reply
    assert canary.hits == 0


def test_connect_is_refused(stack: Stack, canary: Canary) -> None:
    reply = raw_request(
        _port(stack),
        f"CONNECT 127.0.0.1:{canary.port} HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{canary.port}\r\n\r\n".encode(),
    )
    assert reply.startswith(b"HTTP/1.1 400")  # mitmproxy's, before any hook: as JSON
    head, _, body = reply.partition(b"\r\n\r\n")
    assert b"application/json" in head.lower()
    assert json.loads(body)["error"]["data"]["policy"] == "request"
    assert canary.hits == 0


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/internal/routes/finney",
        "/api/v1/%69nternal/routes/finney",
        "/api/v1/%2569nternal/routes/finney",
        "/x/../api/v1/internal/usage",
        "//api/v1/internal/routes/finney",
        "/api/v1/internal",
    ],
)
def test_sidecar_internal_paths_are_refused(stack: Stack, path: str) -> None:
    reply = raw_request(_port(stack), f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert reply.startswith(b"HTTP/1.1 404")
    assert b'"jsonrpc":"2.0"' in reply


@pytest.mark.parametrize(
    ("path", "answer"),
    [(b"/dash\xffboard", b"HTTP/1.1 404"), (b"/rpc/v1/\xffinney", b"HTTP/1.1 404")],
)
def test_a_path_whose_bytes_are_not_utf8_is_answered_by_chainproxy(
    stack: Stack, path: bytes, answer: bytes
) -> None:
    """Checked and passed on percent-encoded (the sidecar's 404, a JSON-RPC 404):
    never mitmproxy forwarding the raw request line to its reverse target after
    a hook failed on it (found by the direct-read fuzz)."""
    reply = raw_request(_port(stack), b"POST " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert reply.startswith(answer), reply[:300]
    assert b"aiohttp" not in reply and b"Invalid char" not in reply, reply[:300]
    # the same path as a WebSocket handshake: refused the same way, never upgraded
    upgrade = _upgrade("/x", "x").replace(b"GET /x ", b"GET " + path + b" ", 1)
    reply = _head(_port(stack), upgrade)
    assert reply.startswith(answer), reply[:300]


def _upgrade(target: str, host: str) -> bytes:
    return (
        f"GET {target} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n"
    ).encode()


def _head(port: int, data: bytes) -> bytes:
    """The answer's head only (a 101 keeps the socket open)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
        return buf


@pytest.mark.parametrize(
    "target",
    ["{canary}/rpc/v1/finney", "{canary}/secret", "/rpc/v1/nosuchnet", "/api/v1/anything"],
)
def test_websocket_handshake_never_reaches_another_host(
    stack: Stack, canary: Canary, target: str
) -> None:
    """The one connection mitmproxy opens itself is a WebSocket's, and only to
    the proxy's own sink, only for an RPC path of a configured network."""
    host = f"127.0.0.1:{canary.port}"
    reply = _head(_port(stack), _upgrade(target.format(canary=f"http://{host}"), host))
    assert b"canary" not in reply
    if target.endswith("/rpc/v1/finney"):
        assert reply.startswith(b"HTTP/1.1 101")  # relayed to the sink, not the canary
    else:
        assert not reply.startswith(b"HTTP/1.1 101")
    assert canary.hits == 0
