"""Closed-loop (or, with ``--rate``, paced) HTTP/1.1 POST load generator (asyncio
streams, keep-alive): the fallback for machines without ``wrk``, and the
generator of the latency-under-a-slow-upstream scenario. ``--distinct``: every
call a new ``state_getStorage`` key instead of the body (never cached, never
shared with another call). ``--xff N``: every call with an ``X-Forwarded-For``
from the next of N client addresses (as ``bench/redis_stack.py``'s wrk script
sends them). Prints one ``BENCHJSON {...}`` line in the same
shape as the wrk script of ``bench/load.py``.

    python bench/pyload.py --url http://127.0.0.1:8080/rpc/v1/finney \
        --body-file body.json --connections 32 --duration 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.wsload import miss_key


async def _worker(
    host: str,
    port: int,
    request: Callable[[], bytes],
    stop_at: float,
    timeout: float,
    lat: list[float],
    errs: dict[str, int],
    interval: float = 0.0,
    offset: float = 0.0,
) -> None:
    """Closed loop; with ``interval`` > 0, paced: one request per slot of a fixed
    grid (``offset + k * interval``). After a late answer the missed slots are
    skipped (no catching up in bursts) and the next request waits for the next
    slot of the same grid, so the connections stay staggered as they started:
    a slow call must not shift one connection into another's phase, which
    would make the arrivals bunch and every later call queue behind another."""
    reader = writer = None
    next_at = time.monotonic() + offset
    while time.monotonic() < stop_at:
        if interval:
            delay = next_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            next_at += interval
            now = time.monotonic()
            if next_at <= now:  # late: skip the slots missed, keep the phase
                next_at += interval * (int((now - next_at) / interval) + 1)
            if time.monotonic() >= stop_at:
                break
        try:
            if writer is None:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(host, port), timeout
                )
            assert reader is not None
            t0 = time.perf_counter()
            writer.write(request())
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
            length, close = 0, False
            status = int(head.split(b" ", 2)[1])
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value)
                elif name == b"connection" and value.strip().lower() == b"close":
                    close = True
            await asyncio.wait_for(reader.readexactly(length), timeout)
            lat.append(time.perf_counter() - t0)
            if status >= 400:
                errs["status"] += 1
            if close:
                writer.close()
                reader = writer = None
        except TimeoutError:
            errs["timeout"] += 1
            if writer is not None:
                writer.close()
            reader = writer = None
        except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
            errs["read"] += 1
            if writer is not None:
                writer.close()
            reader = writer = None
            await asyncio.sleep(0.01)
    if writer is not None:
        writer.close()


def xff_address(i: int) -> str:
    """Client address ``i`` of an ``--xff`` rotation: 10.x.y.z."""
    return f"10.{i // 65536}.{(i // 256) % 256}.{i % 256}"


def _pct(sorted_ms: list[float], p: float) -> float:
    if not sorted_ms:
        return 0.0
    return sorted_ms[min(len(sorted_ms) - 1, int(p / 100 * len(sorted_ms)))]


async def main_async(
    args: argparse.Namespace, body: bytes
) -> tuple[dict[str, float | int], list[float]]:
    parts = urlsplit(args.url)
    path = parts.path or "/"

    def post(b: bytes, i: int = 0) -> bytes:
        xff = f"X-Forwarded-For: {xff_address(i % args.xff)}\r\n" if args.xff else ""
        return (
            f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n{xff}"
            f"Content-Type: application/json\r\nContent-Length: {len(b)}\r\n\r\n"
        ).encode() + b

    fixed = post(body)
    nonce = int.from_bytes(os.urandom(4), "big")
    counter = iter(range(1 << 62))

    def request() -> bytes:
        if not args.distinct:
            return post(body, next(counter)) if args.xff else fixed
        i = next(counter)
        doc = {
            "jsonrpc": "2.0",
            "id": i,
            "method": "state_getStorage",
            "params": [miss_key(nonce, i)],
        }
        return post(json.dumps(doc).encode(), i)

    lat: list[float] = []
    errs = {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}
    start = time.monotonic()
    stop_at = start + args.duration
    interval = args.connections / args.rate if args.rate > 0 else 0.0
    await asyncio.gather(
        *(
            _worker(
                parts.hostname,
                parts.port or 80,
                request,
                stop_at,
                args.timeout,
                lat,
                errs,
                interval,
                interval * i / args.connections,
            )
            for i in range(args.connections)
        )
    )
    elapsed = time.monotonic() - start
    ms = sorted(x * 1000 for x in lat)
    out = {
        "requests": len(ms),
        "duration_s": elapsed,
        "p50_ms": _pct(ms, 50),
        "p90_ms": _pct(ms, 90),
        "p99_ms": _pct(ms, 99),
        "max_ms": ms[-1] if ms else 0.0,
        **errs,
    }
    return out, ms


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--body-file", required=True)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument(
        "--rate", type=float, default=0.0, help="requests/s over all connections (0: closed loop)"
    )
    ap.add_argument("--samples", help="also write every latency (ms, sorted) to this JSON file")
    ap.add_argument(
        "--distinct",
        action="store_true",
        help="instead of the body: state_getStorage of a key no call asked before, every call",
    )
    ap.add_argument(
        "--xff",
        type=int,
        default=0,
        help="an X-Forwarded-For on every call, rotating over this many client addresses",
    )
    args = ap.parse_args()
    with open(args.body_file, "rb") as f:
        body = f.read()
    out, ms = asyncio.run(main_async(args, body))
    if args.samples:
        Path(args.samples).write_text(json.dumps([round(x, 3) for x in ms]))
    print("BENCHJSON " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
