"""Probe of an SSE endpoint: connect and wait for the first complete event."""

from __future__ import annotations

import re
import time

from sidecar.probing.probes.base import Observation, ProbeCall, elapsed_ms, run_probe
from sidecar.probing.probes.classify import ProbeFailure, raise_for_status
from sidecar.probing.results import BAD_RESPONSE, LIVE, ProbeResult

# Bytes read before giving up on seeing an event (comments/keep-alives only).
SSE_READ_LIMIT = 1_048_576
_EOL = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"


class SseEventDetector:
    """Incremental check for the first complete event of a ``text/event-stream``:
    a block ended by a blank line that holds a ``data`` field (per the HTML
    spec; lines end with CRLF, LF or CR, and chunks may split anywhere)."""

    def __init__(self) -> None:
        self._buf = b""
        self._started = False
        self._skip_lf = False  # the last chunk ended in CR: a leading LF belongs to it
        self._has_data = False
        self.complete = False

    def feed(self, chunk: bytes) -> bool:
        """Feed bytes; True once a complete event has been seen."""
        if self.complete:
            return True
        if self._skip_lf and chunk:
            if chunk.startswith(b"\n"):
                chunk = chunk[1:]
            self._skip_lf = False
        data = self._buf + chunk
        if not self._started:
            if len(data) < len(_BOM) and _BOM.startswith(data):
                self._buf = data  # maybe a BOM still arriving
                return False
            if data.startswith(_BOM):
                data = data[len(_BOM) :]
            self._started = True
        start = 0
        for m in _EOL.finditer(data):
            if m.group() == b"\r" and m.end() == len(data):
                self._skip_lf = True  # may be the first half of a CRLF
            if self._line(data[start : m.start()]):
                self.complete = True
                self._buf = b""
                return True
            start = m.end()
        self._buf = data[start:]
        return False

    def _line(self, line: bytes) -> bool:
        if not line:  # blank line: dispatch the block
            done = self._has_data
            self._has_data = False
            return done
        if line.startswith(b":"):  # comment (keep-alive)
            return False
        if line.split(b":", 1)[0] == b"data":
            self._has_data = True
        return False


async def probe_sse(call: ProbeCall, *, read_limit: int = SSE_READ_LIMIT) -> ProbeResult:
    """``live`` once one complete event arrives within the timeout; ``timeout`` if
    none does; ``bad-response`` for a wrong content type or a stream that ends."""

    async def body(obs: Observation) -> None:
        started = time.monotonic()
        headers = {
            "Accept": "text/event-stream",
            "Cache-Control": "no-cache",
            "Accept-Encoding": "identity",
        }
        async with call.session.get(call.endpoint.url, headers=headers) as resp:
            obs.latency_ms = elapsed_ms(started)
            status = resp.status
            raise_for_status(status)
            if status != 200:
                raise ProbeFailure(BAD_RESPONSE, f"HTTP {status}, expected 200")
            if resp.content_type != "text/event-stream":
                shown = resp.content_type[:60]
                raise ProbeFailure(BAD_RESPONSE, f"content type {shown}, not text/event-stream")
            detector = SseEventDetector()
            read = 0
            try:
                async for chunk in resp.content.iter_any():
                    read += len(chunk)
                    if detector.feed(chunk):
                        obs.finish(LIVE, f"first event after {elapsed_ms(started)} ms")
                        return
                    if read > read_limit:
                        raise ProbeFailure(BAD_RESPONSE, f"no event in the first {read} bytes")
                raise ProbeFailure(BAD_RESPONSE, "stream ended before the first event")
            finally:
                resp.close()  # an event stream never ends: do not reuse the connection

    return await run_probe(call, body)
