"""A raw HTTP/1.1 client for the direct-reads tests: send any bytes, split
anywhere, read answers one by one, and compare two proxies' answers with the
values that differ between processes (ids, quota, upstream choice) masked."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from pathlib import Path
from typing import Any

import yaml

from tests.e2e.harness import Stack

# values that differ between two processes serving the same bytes
VARYING = frozenset(
    {
        b"x-request-id",
        b"x-ratelimit-remaining",
        b"x-ratelimit-reset",
        b"x-chainproxy-upstream",
        b"x-chainproxy-attempts",
        b"x-metagraph-rpc-endpoint-id",
        b"x-metagraph-rpc-provider",
        b"x-metagraph-rpc-attempts",
        b"x-cache",
        b"x-metagraph-rpc-cache",
        b"content-length",  # the body is compared as JSON, ids masked
        b"date",
    }
)
CLOSED = b"<closed>"
SILENT = b"<silent>"


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def start_direct_off(stack: Stack) -> str:
    """A second proxy on the stack's config, with its own data_dir, every
    request through mitmproxy (``chainproxy_http_direct=false``): its URL."""
    assert stack.config_path is not None
    config = dict(stack.config)
    config["data_dir"] = str(stack.tmp / "data-off")
    path = Path(stack.tmp) / "config-off.yaml"
    path.write_text(yaml.safe_dump(config))
    proc, url = stack.start_chainproxy(
        "mitmdump-off",
        path,
        config["sidecar"]["url"],
        sets=(
            *(o for o in stack.proxy_sets if not o.startswith("chainproxy_http_direct=")),
            "chainproxy_http_direct=false",
        ),
    )
    stack.wait_routing_view(proc, url)
    return url


def post(body: bytes | dict[str, Any], *, headers: str = "", network: str = "finney") -> bytes:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return (
        f"POST /rpc/v1/{network} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"{headers}Content-Length: {len(raw)}\r\n\r\n"
    ).encode() + raw


class Raw:
    def __init__(self, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.closed = False

    def send(self, data: bytes, pieces: list[int] | None = None, gap_s: float = 0.0) -> None:
        """``data`` in one write, or cut at ``pieces`` (offsets) with ``gap_s`` between."""
        if not pieces:
            self.sock.sendall(data)
            return
        points = sorted({p % (len(data) + 1) for p in pieces})
        for a, b in zip([0, *points], [*points, len(data)], strict=True):
            if a < b:
                with contextlib.suppress(OSError):
                    self.sock.sendall(data[a:b])
                if gap_s:
                    time.sleep(gap_s)

    def _more(self, deadline: float) -> bool:
        left = deadline - time.monotonic()
        if left <= 0 or self.closed:
            return False
        self.sock.settimeout(left)
        try:
            chunk = self.sock.recv(65536)
        except TimeoutError:
            return False
        except OSError:
            chunk = b""
        if not chunk:
            self.closed = True
            return False
        self.buf += chunk
        return True

    def response(self, timeout: float = 5.0) -> bytes:
        """One whole response (head and body), ``CLOSED`` or ``SILENT``."""
        deadline = time.monotonic() + timeout
        while b"\r\n\r\n" not in self.buf:
            if not self._more(deadline):
                return CLOSED if self.closed else SILENT
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        status = head.split(b" ", 2)[1] if b" " in head else b""
        if status == b"100":
            self.buf = rest
            return head + b"\r\n\r\n"
        while len(rest) < length:
            if not self._more(deadline):
                return CLOSED if self.closed else SILENT
            head, _, rest = self.buf.partition(b"\r\n\r\n")
        self.buf = rest[length:]
        return head + b"\r\n\r\n" + rest[:length]

    def wait_closed(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self._more(deadline):
            pass
        return self.closed

    def close(self) -> None:
        self.sock.close()


def masked(raw: bytes) -> tuple[bytes, list[tuple[bytes, bytes]], Any]:
    """A response as two processes should agree on it."""
    if raw in (CLOSED, SILENT):
        return raw, [], None
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    headers = []
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        key = name.strip().lower()
        headers.append((name, b"*" if key in VARYING else value.strip()))
    doc: Any = body
    with contextlib.suppress(ValueError):
        doc = json.loads(body)
    return lines[0], headers, doc
