"""The access log (``proxy.access_log``): one JSON line per call, as operators
know it from nginx, proxyd and dshackle, written off the event loop.

A line per call item (a batch's items and WebSocket calls each get one):
``time, request_id, network, method, outcome, status, cache, upstream,
attempts, latency_ms, upstream_ms, units, tier, client``. ``units`` are what
the line's item was charged (a batch's lines add up to the batch's price, its
answers' bytes included), so summing them by ``client`` finds who costs the
most. ``upstream_ms`` is
how long the attempt whose answer was used took (nginx's
``$upstream_response_time``; null when no node was asked): ``latency_ms``
less it is the proxy's own share, waits for a node's budget included. The client's address is logged
as configured (``proxy.access_log_client``): ``full``, ``truncated`` (IPv4 to
its /24, IPv6 to its /48: enough to spot a subnet, not a person) or
``hashed`` (a salted hash, stable within one proxy process); an API key or
its digest never. Lines wait in a bounded queue and a thread writes them in
batches; a queue that is full (a disk slower than the traffic) or a write
that fails (a full disk) drops lines and counts them, never a call.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import IO, Any

from addon.pipeline.context import RpcContext
from addon.reporting.live_metrics import is_refusal
from addon.rpc.jsonrpc import Call
from common.jsontext import dumps

log = logging.getLogger("chainproxy.access")

MAX_QUEUED = 20_000  # lines waiting for the writer; beyond, dropped and counted
_BATCH = 1024


def client_field(address: str, mode: str, salt: bytes) -> str:
    """The client's address as the log may show it."""
    if not address or mode == "full":
        return address
    if mode == "hashed":
        return hashlib.sha256(salt + address.encode()).hexdigest()[:16]
    try:
        ip = ipaddress.ip_address(address.partition("/")[0])
    except ValueError:
        return "-"
    prefix = 24 if ip.version == 4 else 48
    return str(ipaddress.ip_network(f"{ip}/{prefix}", strict=False))


class AccessLog:
    def __init__(
        self,
        target: str,
        *,
        client_mode: str = "truncated",
        on_drop: Callable[[int], None] = lambda n: None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.target = target
        self.client_mode = client_mode
        self.on_drop = on_drop
        self.clock = clock
        self.dropped = 0
        self._salt = os.urandom(16)
        # addresses repeat: each is truncated or hashed once (ipaddress is ~10 µs)
        self._client = functools.lru_cache(maxsize=65_536)(self._client_uncached)
        self._second = -1
        self._stamp = ""
        self._lines: deque[bytes] = deque()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._failed = 0  # lines the writer thread could not write, not yet counted
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="access-log", daemon=True)
        self._thread.start()

    def write(self, rpc: RpcContext, status: int, outcome: str, latency_s: float) -> None:
        """The lines of one finished call (cheap: a dict and a dumps per item)."""
        base: dict[str, Any] = {
            "time": self._time(),
            "request_id": rpc.request_id,
            "network": rpc.network,
            "status": status,
            "upstream": rpc.upstream,
            "attempts": len(rpc.attempts),
            "latency_ms": round(latency_s * 1000, 1),
            "upstream_ms": rpc.attempts[-1].latency_ms if rpc.attempts else None,
            "tier": rpc.tier or "default",
            "client": self._client(rpc.address),
            "transport": "ws" if rpc.websocket else "http",
        }
        if self._failed:
            with self._lock:
                failed, self._failed = self._failed, 0
            self._drop(failed)
        items = rpc.parsed.items if rpc.parsed is not None else ()
        units = rpc.item_units or {}
        lines = []
        if not items:
            line = {**base, "method": None, "outcome": outcome, "cache": None, "units": rpc.units}
            lines.append(dumps(line))
        sent = set(rpc.forwarded) if len(items) > 1 else None
        for i, item in enumerate(items):
            answer = rpc.answers[i] if i < len(rpc.answers) else None
            failed = outcome != "ok" or (answer is not None and "error" in answer)
            line = {
                **base,
                "method": item.method if isinstance(item, Call) else None,
                "outcome": outcome if outcome != "ok" else "error" if failed else "ok",
                "cache": "HIT" if i in rpc.hits else "MISS",
                "units": units.get(i, 0),  # this item's: a batch's lines add up
            }
            if sent is not None and i not in sent:
                # a batch's item no node was asked for (refused, a hit, a
                # subscription): not the attempts of the items that were
                line["upstream"], line["attempts"], line["upstream_ms"] = None, 0, None
            if failed and outcome == "ok" and is_refusal(answer, asked=i in rpc.forwarded):
                line["outcome"] = "refused"  # as the live metrics count it
            if line["outcome"] == "refused":
                line["cache"] = None  # nothing was looked up for it
            lines.append(dumps(line))
        self._queue(lines)

    def _client_uncached(self, address: str) -> str:
        return client_field(address, self.client_mode, self._salt)

    def _time(self) -> str:
        """ISO 8601 with milliseconds, UTC; the seconds part formatted once a second."""
        now = self.clock()
        second = int(now)
        if second != self._second:
            self._second = second
            self._stamp = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        return f"{self._stamp}.{int((now - second) * 1000):03d}Z"

    def _queue(self, lines: list[bytes]) -> None:
        room = MAX_QUEUED - len(self._lines)
        if room < len(lines):
            self._drop(len(lines) - max(room, 0))
            lines = lines[: max(room, 0)]
        self._lines.extend(lines)
        self._wake.set()

    def _drop(self, n: int) -> None:
        if n <= 0:
            return
        if self.dropped == 0:
            log.warning("access log behind or failing: dropping lines (counted)")
        self.dropped += n
        self.on_drop(n)

    def _run(self) -> None:
        out: IO[bytes] | None = None
        while True:
            self._wake.wait(0.5)
            self._wake.clear()
            batch: list[bytes] = []
            while self._lines and len(batch) < _BATCH:
                batch.append(self._lines.popleft())
            if batch:
                try:
                    if out is None:
                        out = self._open()
                    out.write(b"\n".join(batch) + b"\n")
                    out.flush()
                except OSError:
                    with self._lock:  # counted on the event loop, with the next call
                        self._failed += len(batch)  # a full disk: lines go, calls do not
                    out = None
                if self._lines:
                    self._wake.set()
                continue
            if self._stop:
                break
        if out is not None and out is not sys.stdout.buffer:
            out.close()

    def _open(self) -> IO[bytes]:
        if self.target == "stdout":
            return sys.stdout.buffer
        return open(self.target, "ab")

    def close(self, timeout_s: float = 2.0) -> None:
        """Write what is queued (bounded), then stop the writer."""
        self._stop = True
        self._wake.set()
        self._thread.join(timeout_s)
