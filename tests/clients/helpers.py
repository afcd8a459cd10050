"""Small HTTP helpers for the client tests (blocking: the tests are synchronous,
like the clients they drive)."""

from __future__ import annotations

import http.client
import json
import queue
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import IO, Any
from urllib.parse import urlsplit

from tests.clients.chopsticks_stack import NETWORK, ChainStack


def raw_post(
    url: str, method: str, params: list[Any] | None = None, *, source_ip: str, id_: Any = 1
) -> tuple[int, dict[str, str], Any]:
    """(status, headers, parsed body or None) of one call from ``source_ip``,
    whatever the status."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, source_address=(source_ip, 0))
    try:
        doc = {"jsonrpc": "2.0", "id": id_, "method": method, "params": params or []}
        conn.request("POST", parts.path, json.dumps(doc), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        return resp.status, dict(resp.getheaders()), body
    finally:
        conn.close()


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.loads(resp.read())


def failovers(chain: ChainStack) -> int:
    """Calls the proxy answered after failing over (the sidecar's usage API)."""
    usage = get_json(f"{chain.stack.sidecar_url}/api/v1/usage?network={NETWORK}")
    return int(usage["failover"]["count"])


def eventually(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.25)
    return False


class LineReader:
    """Lines of a child's text output, read by a thread (so waits can time out)."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._queue.put(line)
        self._queue.put(None)

    def wait_for(self, text: str, timeout: float) -> bool:
        """True once a line containing ``text`` was read; False on EOF or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return False
            if line is None:
                return False
            self.lines.append(line)
            if text in line:
                return True

    @property
    def text(self) -> str:
        return "".join(self.lines)
