"""What one upstream call costs the proxy's process: chainproxy's two clients,
``AiohttpTransport`` (``addon/upstream/forward.py``, ``proxy.upstream_client:
aiohttp``) and ``LeanTransport`` (``addon/upstream/lean/client.py``, the
default), against a minimal keep-alive HTTP/1.1 client on an
``asyncio.Protocol`` (the shape of ``addon/redislink/pipe.py``), all POSTing to
the trivial upstream, one call at a time and 32 at once; CPU time of this
process per call, rotating order each round, medians. The minimal client is a
measuring stick (the floor), not a product: no chunked bodies, redirects, TLS,
size cap, limits or stale-connection retry.

    python bench/bench_upstream_client.py [--rounds 5] [--calls 4000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from addon.upstream.forward import AiohttpTransport, new_session
from addon.upstream.lean.client import LeanTransport
from bench.stack import Stack

BODY = json.dumps(
    {"jsonrpc": "2.0", "id": 1, "method": "chain_getBlockHash", "params": [3_999_000]}
).encode()


class _Conn(asyncio.Protocol):
    def __init__(self) -> None:
        self.buf = bytearray()
        self.waiter: asyncio.Future[tuple[int, bytes]] | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(self.buf[:end]).lower()
        i = head.find(b"content-length:")
        n = int(head[i + 15 : head.find(b"\r\n", i) if b"\r\n" in head[i:] else None])
        if len(self.buf) < end + 4 + n:
            return
        body = bytes(self.buf[end + 4 : end + 4 + n])
        status = int(self.buf[9:12])
        del self.buf[: end + 4 + n]
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result((status, body))

    def post(self, path: bytes, body: bytes) -> asyncio.Future[tuple[int, bytes]]:
        assert self.transport is not None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(
            b"POST %s HTTP/1.1\r\nHost: upstream\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (path, len(body), body)
        )
        return self.waiter


class MinimalTransport:
    """``Transport`` (``post(url, body, timeout)``) over pooled keep-alive connections."""

    def __init__(self) -> None:
        self.idle: dict[str, list[_Conn]] = {}

    async def post(self, url: str, body: bytes, timeout: float) -> tuple[int, bytes]:
        pool = self.idle.setdefault(url, [])
        conn = pool.pop() if pool else None
        if conn is None:
            host, _, port = url.split("//", 1)[1].partition(":")
            _, conn = await asyncio.get_running_loop().create_connection(
                _Conn, host, int(port.split("/", 1)[0])
            )
        async with asyncio.timeout(timeout):
            result = await conn.post(b"/", body)
        pool.append(conn)
        return result


async def per_call(transport: Any, url: str, concurrency: int, calls: int) -> float:
    async def worker() -> None:
        for _ in range(calls // concurrency):
            status, _ = await transport.post(url, BODY, 5.0)
            assert status == 200

    start = time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return (time.process_time() - start) / calls * 1e6


async def main_async(url: str, rounds: int, calls: int) -> dict[str, float]:
    session = new_session()
    lean = LeanTransport(max_response_bytes=1 << 24)
    clients = {
        "aiohttp": AiohttpTransport(session, max_response_bytes=1 << 24),
        "lean": lean,
        "minimal": MinimalTransport(),
    }
    out: dict[str, list[float]] = {}
    try:
        for c in (1, 32):  # warm: connections open
            for t in clients.values():
                await per_call(t, url, c, 200)
        for r in range(rounds):
            for c in (1, 32):
                k = r % len(clients)  # each client first in turn
                names = list(clients)[k:] + list(clients)[:k]
                for name in names:
                    us = await per_call(clients[name], url, c, calls)
                    out.setdefault(f"{name}, c={c}", []).append(us)
    finally:
        lean.close()
        await session.close()
    return {k: statistics.median(v) for k, v in out.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=4000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="chainproxy-client-") as tmp:
        st = Stack(Path(tmp))
        try:
            url = st.start_trivial(600)
            res = asyncio.run(main_async(url, args.rounds, args.calls))
        finally:
            st.stop()
    for k, v in res.items():
        print(f"{k}: {v:.0f} µs CPU per upstream call")
    for c in (1, 32):
        a = res[f"aiohttp, c={c}"]
        for name in ("lean", "minimal"):
            b = res[f"{name}, c={c}"]
            print(f"c={c}: {name} ÷ aiohttp {b / a:.2f} ({a - b:.0f} µs less per call)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
