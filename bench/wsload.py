"""Closed-loop JSON-RPC load over WebSocket (or, with ``--http``, HTTP/1.1
keep-alive) with a mix of repeated and distinct calls, in a process of its
own. Prints one ``BENCHJSON {...}`` line in the shape of ``bench/load.py``'s.

    python bench/wsload.py --url ws://127.0.0.1:8080/rpc/v1/finney \
        --sockets 1 --concurrency 32 --duration 3 \
        --hit '["chain_getHeader", ["0xabc…"]]' --miss-ratio 0.5 --nonce 7

``--concurrency`` calls are in flight at all times, spread evenly over
``--sockets`` connections (32 over 1 socket: 32 calls in flight on it, told
apart by id; HTTP needs one connection per call in flight). Call ``i`` is a
*miss* (``state_getStorage`` of a key no other call of any run asked:
``--nonce`` makes runs distinct) when ``is_miss(i, ratio)``, else the repeated
``--hit`` call; ``--miss-kind blockhash``: ``chain_getBlockHash`` of a height
no other call of the run asked instead. A JSON-RPC ``error`` in an answer
counts as a ``status`` error. The WebSocket frames are ``bench/wsframe.py``'s:
a few µs per message here, so this client is not what limits a proxy at
~1,000 calls/s.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import wsframe

# the System pallet's prefix: simnode answers a value (not null) for such keys,
# so a miss through chainproxy is stored in its cache, as a real one would be
KEY_PREFIX = "0x26aa394eea5630e07c48ae0c9558cef7"


def is_miss(i: int, ratio: float) -> bool:
    """Whether call ``i`` (0, 1, …) is a distinct call: evenly spread, ``ratio``
    of every run of calls (0: none, 1: all)."""
    return int((i + 1) * ratio) > int(i * ratio)


def miss_key(nonce: int, i: int) -> str:
    """A storage key no other call asks: the run's nonce and the call's index."""
    return f"{KEY_PREFIX}{nonce & 0xFFFFFFFF:08x}{i:016x}"


def miss_height(nonce: int, i: int, below: int = 3_900_000) -> int:
    """A height for call ``i``: distinct within a run, the run's start drawn from
    its nonce (runs rarely overlap: a few thousand heights of ``below``)."""
    return (nonce * 7_919 + i) % below + 1


def body(
    i: int,
    ratio: float,
    nonce: int,
    hit: tuple[str, Any],
    kind: str = "storage",
    at: str | None = None,
) -> bytes:
    """Call ``i``'s JSON-RPC request, with ``i`` as its id; ``at``: the block hash
    a storage miss reads at (the head's, as head pinning would send it)."""
    if is_miss(i, ratio):
        if kind == "blockhash":
            method, params = "chain_getBlockHash", [miss_height(nonce, i)]
        else:
            method = "state_getStorage"
            params = [miss_key(nonce, i), *([at] if at else [])]
    else:
        method, params = hit
    return orjson.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params})


def failed(answer: bytes) -> tuple[int | None, bool]:
    """The id of an answer and whether it is a JSON-RPC error."""
    doc = orjson.loads(answer)
    if isinstance(doc, dict):
        return doc.get("id"), "error" in doc
    return None, True


class _Conn(asyncio.Protocol):
    """One connection: requests written, answers matched to their waiters."""

    def __init__(self, ws: bool) -> None:
        self.ws = ws
        self.transport: asyncio.Transport | None = None
        self.head = bytearray()  # before the upgrade (WS) / the HTTP response in parts
        self.parser = wsframe.Parser() if ws else None
        self.upgraded: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting: dict[int, asyncio.Future[bool]] = {}  # id -> error?
        self.http_fifo: list[asyncio.Future[bool]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        err = ConnectionError("closed")
        for f in [*self.waiting.values(), *self.http_fifo]:
            if not f.done():
                f.set_exception(err)
        if self.ws and not self.upgraded.done():
            self.upgraded.set_exception(err)

    def data_received(self, data: bytes) -> None:
        if not self.ws:
            self._http(data)
            return
        if not self.upgraded.done():
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            ok = self.head.startswith(b"HTTP/1.1 101")
            rest, self.head = bytes(self.head[end + 4 :]), bytearray()
            if not ok:
                self.upgraded.set_exception(ConnectionError("upgrade refused"))
                return
            self.upgraded.set_result(None)
            data = rest
        assert self.parser is not None
        for opcode, payload in self.parser.feed(data):
            if opcode in (wsframe.TEXT, wsframe.BINARY):
                rid, err = failed(payload)
                f = self.waiting.pop(rid, None) if isinstance(rid, int) else None
                if f is not None and not f.done():
                    f.set_result(err)

    def _http(self, data: bytes) -> None:
        self.head += data
        while True:
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            length = 0
            for line in bytes(self.head[:end]).split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(self.head) < end + 4 + length:
                return
            status_ok = self.head[9:10] == b"2"
            answer = bytes(self.head[end + 4 : end + 4 + length])
            del self.head[: end + 4 + length]
            f = self.http_fifo.pop(0)
            if not f.done():
                f.set_result(not status_ok or failed(answer)[1])

    def call(self, i: int, payload: bytes, host: str, path: str) -> asyncio.Future[bool]:
        assert self.transport is not None
        f: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        if self.ws:
            self.waiting[i] = f
            self.transport.write(wsframe.frame(payload, mask=wsframe.ZERO_MASK))
        else:
            self.http_fifo.append(f)
            self.transport.write(
                b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s"
                % (path.encode(), host.encode(), len(payload), payload)
            )
        return f


async def _open(url: str, ws: bool) -> _Conn:
    parts = urlsplit(url)
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(
        lambda: _Conn(ws), parts.hostname or "127.0.0.1", parts.port or 80
    )
    if ws:
        key = base64.b64encode(os.urandom(16))
        assert conn.transport is not None
        conn.transport.write(
            b"GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n"
            % ((parts.path or "/").encode(), parts.netloc.encode(), key)
        )
        await asyncio.wait_for(conn.upgraded, 10)
    return conn


def percentile(sorted_ms: list[float], p: float) -> float:
    if not sorted_ms:
        return 0.0
    return sorted_ms[min(len(sorted_ms) - 1, int(p / 100 * len(sorted_ms)))]


async def run(args: argparse.Namespace) -> dict[str, float | int]:
    ws = not args.http
    if not ws and args.sockets != args.concurrency:
        raise SystemExit("--http: one connection per call in flight (--sockets = --concurrency)")
    hit = tuple(json.loads(args.hit))
    parts = urlsplit(args.url)
    host, path = parts.netloc, parts.path or "/"
    conns = [await _open(args.url, ws) for _ in range(args.sockets)]
    lat: list[float] = []
    errs = {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}
    counter = iter(range(1 << 62))
    stop_at = time.monotonic() + args.duration

    async def lane(conn: _Conn) -> None:
        while time.monotonic() < stop_at:
            i = next(counter)
            payload = body(i, args.miss_ratio, args.nonce, hit, args.miss_kind, args.at)  # type: ignore[arg-type]
            t0 = time.perf_counter()
            try:
                err = await asyncio.wait_for(conn.call(i, payload, host, path), args.timeout)
            except TimeoutError:
                errs["timeout"] += 1
                return
            except ConnectionError:
                errs["read"] += 1
                return
            lat.append(time.perf_counter() - t0)
            if err:
                errs["status"] += 1

    start = time.monotonic()
    per = max(1, args.concurrency // args.sockets)
    await asyncio.gather(*(lane(c) for c in conns for _ in range(per)))
    elapsed = time.monotonic() - start
    for c in conns:
        if c.transport is not None:
            c.transport.close()
    ms = sorted(x * 1000 for x in lat)
    return {
        "requests": len(ms),
        "duration_s": elapsed,
        "p50_ms": percentile(ms, 50),
        "p90_ms": percentile(ms, 90),
        "p99_ms": percentile(ms, 99),
        "max_ms": ms[-1] if ms else 0.0,
        **errs,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="ws://… (or http://… with --http)")
    ap.add_argument("--http", action="store_true", help="HTTP/1.1 POSTs instead of WebSocket")
    ap.add_argument("--sockets", type=int, default=1)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--hit", required=True, help='the repeated call: JSON ["method", [params]]')
    ap.add_argument("--miss-ratio", type=float, default=0.0, help="share of distinct calls")
    ap.add_argument("--miss-kind", choices=("storage", "blockhash"), default="storage")
    ap.add_argument("--at", help="storage misses read at this block hash (cacheable)")
    ap.add_argument("--nonce", type=int, default=0, help="makes this run's distinct calls new")
    out = asyncio.run(run(ap.parse_args()))
    print("BENCHJSON " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
