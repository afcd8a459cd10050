"""Scenario 10's checks of the shared quota itself (``bench/redis_scale.py``):

* ``burst``: one client identity fires more calls than its quota, as fast as
  32 keep-alive connections can, split over two proxy processes that share one
  Redis; every answer's status is counted (the quota is exact when exactly
  ``limit`` of them are 200).
* ``script_cost``: what one quota check costs *Redis* (its CPU per
  ``EVALSHA`` of ``addon/quota/redis_limiter.py``'s script) against how many calls the
  client already has in its window, pipelined from here so only Redis's side
  is measured.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import redis

from addon.quota.redis_limiter import _SCRIPT
from bench.measure import RPC_PATH
from bench.redis_stack import cpu_seconds


@dataclass
class Burst:
    statuses: Counter[int] = field(default_factory=Counter)  # over both processes
    accepted: dict[str, int] = field(default_factory=dict)  # 200s per process URL
    errors: int = 0  # connection errors and timeouts
    seconds: float = 0.0


async def _connection(
    url: str, request: bytes, left: list[int], out: Burst, deadline: float
) -> None:
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        while left[0] > 0 and time.monotonic() < deadline:
            left[0] -= 1
            writer.write(request)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            status = int(head.split(b" ", 2)[1])
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await asyncio.wait_for(reader.readexactly(length), 10)
            out.statuses[status] += 1
            if status == 200:
                out.accepted[url] = out.accepted.get(url, 0) + 1
    except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError, IndexError):
        out.errors += 1
    finally:
        writer.close()


async def _burst(
    urls: list[str], body: bytes, identity: str, calls: int, connections: int, limit_s: float
) -> Burst:
    out = Burst()
    left = [calls]  # shared: each connection takes the next call until none is left
    deadline = time.monotonic() + limit_s
    started = time.monotonic()

    def request(url: str) -> bytes:
        return (
            f"POST {RPC_PATH} HTTP/1.1\r\nHost: {urlsplit(url).netloc}\r\n"
            f"Content-Type: application/json\r\nX-Forwarded-For: {identity}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body

    await asyncio.gather(
        *(
            _connection(urls[i % len(urls)], request(urls[i % len(urls)]), left, out, deadline)
            for i in range(connections)
        )
    )
    out.seconds = time.monotonic() - started
    return out


def burst(
    urls: list[str],
    body: bytes,
    *,
    identity: str,
    calls: int,
    connections: int = 32,
    limit_s: float = 60.0,
) -> Burst:
    """``calls`` calls from ``identity``, over ``connections`` connections spread
    round-robin over ``urls`` (the proxy processes), as fast as they answer."""
    return asyncio.run(_burst(urls, body, identity, calls, connections, limit_s))


def window_entries(redis_url: str, key: str) -> int:
    """How many calls Redis holds in ``key``'s window (the quota's list)."""
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    try:
        return int(client.llen(key))
    finally:
        client.close()


def command_calls(redis_url: str) -> dict[str, int]:
    """How often Redis has run each command since it started (INFO commandstats)."""
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}


SCRIPT_BATCH = 1_000  # quota checks per pipeline in script_cost


def script_cost(
    redis_url: str, redis_pid: int, sizes: tuple[int, ...], budget_s: float = 0.3
) -> dict[int, float]:
    """Redis CPU (µs) per quota check of a client with N calls in its window,
    for each N of ``sizes``. The checks do not take (``take=0``), so the list
    keeps its size; they go out pipelined, so the client's cost is not counted."""
    client = redis.Redis.from_url(redis_url, socket_timeout=30)
    out: dict[int, float] = {}
    try:
        sha = client.script_load(_SCRIPT)
        for n in sizes:
            key = f"bench-script-cost:{n}"
            client.delete(key)
            now_ms = int(time.time() * 1000)
            for start in range(0, n, 10_000):
                client.rpush(key, *([now_ms] * min(10_000, n - start)))
            client.pexpire(key, 120_000)
            # batches until ~budget_s of Redis CPU (at least 2 clock ticks of 10 ms)
            # per size: a check costs ~10 µs at any size, so a count guessed from the
            # size can fall within one tick and read 0
            total, spent = 0, 0.0
            while spent < max(budget_s, 0.02) and total < 500_000:
                pipe = client.pipeline(transaction=False)
                for _ in range(SCRIPT_BATCH):
                    pipe.evalsha(sha, 1, key, 1_000_000_000, 60_000, 1, 0)
                c0 = cpu_seconds(redis_pid)
                pipe.execute()
                spent += cpu_seconds(redis_pid) - c0
                total += SCRIPT_BATCH
            out[n] = spent / total * 1e6
            client.delete(key)
    finally:
        client.close()
    return out
