"""What the shared quota costs the *proxy's* process, in one process against a
redis-server (no HTTP, no wrk), so the machine's noise matters less than in
scenario 10's end-to-end rows.

Scenario 10e (``client_cost``): one check alone, ``addon/redislink/pipe.py``
(what the quota step calls, ``SharedLimiter.decide``) against redis-py's
asyncio client sending the same ``EVALSHA`` (the baseline; the addon's first
version used it), one at a time and 32 at once. CPU seconds ÷ checks.

The whole call (``pipeline_cost``, or ``python bench/redis_client.py
[--quick] [--redis URL]``): the addon's request hooks on prepared flows
(``bench/bench_addon.py``'s way, the upstream a fake that answers at once),
the same config without and with ``redis:``, alternating rounds, medians.
``miss`` is scenario 10's call (``chain_getHeader``, not cacheable: one
``EVALSHA``) at c=1 and c=32; ``cacheable`` a read pinned to a new block each
time (a miss in both tiers: ``EVALSHA``, ``MGET``, then ``SET``) at c=1. The
share is 1 - CPU without ÷ CPU with, as in 10b. ``--side local|redis --calls
N`` runs one side alone, for counting a call's instructions (callgrind) or
system calls (strace) as the difference of two runs with different N.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis.asyncio as aioredis

from addon.addons import build_addons
from addon.cache.store import DiskCacheStore
from addon.hooks.settings import Settings
from addon.quota.local import RateLimiter
from addon.quota.redis_limiter import _SCRIPT, SharedLimiter
from addon.redislink.link import RedisLink
from addon.runtime import Runtime
from bench.bench_addon import UPSTREAM, InstantUpstream, _flows
from chainproxy.supervisor import free_port, spawn
from chainproxy.workers import find_tool, redis_argv
from common.config import RedisConfig, parse_config

CHECKS = 6_000


async def _cpu_per_call(
    call: Callable[[int], Awaitable[Any]], concurrency: int, checks: int = CHECKS
) -> float:
    """µs of this process's CPU per call, after a warm-up."""
    for i in range(min(200, checks)):
        await call(i)
    started = time.process_time()
    per = max(1, checks // concurrency)

    async def lane(k: int) -> None:
        for i in range(per):
            await call(k * per + i)

    await asyncio.gather(*(lane(k) for k in range(concurrency)))
    return (time.process_time() - started) * 1e6 / (per * concurrency)


async def _measure(url: str, checks: int = CHECKS) -> dict[str, float]:
    link = RedisLink(RedisConfig(url=url, key_prefix="bench10e:", timeout_ms=1000, safe_url=url))
    limiter = SharedLimiter(link, RateLimiter(10**9, 60, clock=time.monotonic))
    client = aioredis.Redis.from_url(url, decode_responses=False)
    sha = await client.script_load(_SCRIPT)

    async def pipe_check(i: int) -> Any:
        return await limiter.decide(f"c{i % 1000}")  # what the quota step calls

    async def redispy_check(i: int) -> Any:
        return await client.execute_command(
            "EVALSHA", sha, 1, limiter.key(f"c{i % 1000}"), 10**9, 60_000, 1, 1
        )

    out = {}
    for name, fn in (("pipe", pipe_check), ("redis-py", redispy_check)):
        for c in (1, 32):
            out[f"{name} c={c}"] = await _cpu_per_call(fn, c, checks)
    await link.close()
    await client.aclose()
    return out


def client_cost(url: str, checks: int = CHECKS) -> dict[str, float]:
    return asyncio.run(_measure(url, checks))


MISS = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "chain_getHeader", "params": []}).encode()


def _pinned(i: int) -> bytes:
    block = "0x" + f"{i:064x}"
    return json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "chain_getHeader", "params": [block]}
    ).encode()


def _stages(tmp: Path, redis_url: str | None) -> list[Any]:
    raw: dict[str, Any] = {
        "proxy": {"networks": ["finney"], "rate_limit": {"requests": 10**9, "window_s": 60}},
        "data_dir": str(tmp),
        "registry": {
            "endpoints": [
                {"url": UPSTREAM, "provider": "p", "kind": "node-rpc", "network": "finney"}
            ]
        },
    }
    if redis_url is not None:
        raw["redis"] = {
            "url": redis_url,
            "key_prefix": f"bench-pipe-{time.time_ns()}:",
            "timeout_ms": 5000,  # never the local fallback, even under a slow tool
        }
    config = parse_config(raw, env={})
    addons = build_addons()
    settings = next(a for a in addons if isinstance(a, Settings))
    rt = Runtime.build(config)
    rt.cache = DiskCacheStore(tmp / "cache", size_limit_mb=64)
    rt.transport = InstantUpstream()
    settings.holder.runtime = rt
    return [a for a in addons if not isinstance(a, Settings)]


async def _one(hooks: list[Any], f: Any) -> None:
    for hook in hooks:
        r = hook(f)
        if r is not None:
            await r


async def _cpu(stages: list[Any], flows: list[Any], concurrency: int) -> float:
    """µs of this process's CPU per call."""
    hooks = [s.request for s in stages if hasattr(s, "request")]
    gc.collect()
    start = time.process_time()
    if concurrency == 1:
        for f in flows:
            await _one(hooks, f)
    else:
        lanes = [flows[k::concurrency] for k in range(concurrency)]

        async def lane(mine: list[Any]) -> None:
            for f in mine:
                await _one(hooks, f)

        await asyncio.gather(*(lane(m) for m in lanes))
    elapsed = time.process_time() - start
    assert all(f.response is not None and f.response.status_code == 200 for f in flows)
    return elapsed / len(flows) * 1e6


async def _pipeline(redis_url: str, quick: bool) -> dict[str, float]:
    n, rounds = (600, 5) if quick else (2000, 9)
    out: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-redis-pipe-") as tmp:
        sides = {
            "local": _stages(Path(tmp) / "local", None),
            "redis": _stages(Path(tmp) / "redis", redis_url),
        }
        for stages in sides.values():  # warm-up, and the connection opened
            await _cpu(stages, _flows(200, MISS), 1)
        block = 0
        for r in range(rounds):
            for side in ("local", "redis") if r % 2 == 0 else ("redis", "local"):
                stages = sides[side]
                out.setdefault(f"miss c=1 {side}", []).append(
                    await _cpu(stages, _flows(n, MISS), 1)
                )
                out.setdefault(f"miss c=32 {side}", []).append(
                    await _cpu(stages, _flows(n, MISS), 32)
                )
                pinned = [f for i, f in enumerate(_flows(n, MISS))]
                for f in pinned:
                    block += 1
                    f.request.content = _pinned(block)
                out.setdefault(f"cacheable c=1 {side}", []).append(await _cpu(stages, pinned, 1))
    res = {k: statistics.median(v) for k, v in out.items()}
    for row in ("miss c=1", "miss c=32", "cacheable c=1"):
        res[f"{row} share"] = 1 - res[f"{row} local"] / res[f"{row} redis"]
        res[f"{row} added"] = res[f"{row} redis"] - res[f"{row} local"]
    return res


async def one_side(redis_url: str | None, calls: int) -> None:
    """Only ``calls`` miss calls at c=1 on one side, after a warm-up: for counting
    what a call costs with a tool outside (instructions, system calls) as the
    difference of two runs with different ``calls``."""
    with tempfile.TemporaryDirectory(prefix="bench-redis-pipe-") as tmp:
        stages = _stages(Path(tmp), redis_url)
        await _cpu(stages, _flows(200, MISS), 1)
        if calls:
            await _cpu(stages, _flows(calls, MISS), 1)


def pipeline_cost(redis_url: str, quick: bool = False) -> dict[str, float]:
    return asyncio.run(_pipeline(redis_url, quick))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--redis", help="an existing redis-server (default: start one)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--side", choices=("local", "redis"), help="one side only (see one_side)")
    ap.add_argument("--calls", type=int, default=1000, help="with --side")
    args = ap.parse_args()
    if args.side is not None:
        url = args.redis if args.side == "redis" else None
        if args.side == "redis" and url is None:
            sys.exit("--side redis needs --redis URL")
        asyncio.run(one_side(url, args.calls))
        return
    child = None
    url = args.redis
    tmp = tempfile.TemporaryDirectory(prefix="bench-redis-server-")
    if url is None:
        tool = find_tool("redis-server")
        if tool is None:
            sys.exit("redis-server is not installed")
        port = free_port()
        child = spawn(
            "redis", redis_argv(str(tool), port, Path(tmp.name)), log=Path(tmp.name) / "log"
        )
        url = f"redis://127.0.0.1:{port}/0"
        time.sleep(0.5)
    try:
        res = pipeline_cost(url, args.quick)
    finally:
        if child is not None:
            child.stop(grace_s=5)
        tmp.cleanup()
    if args.json:
        print(json.dumps(res))
        return
    for row in ("miss c=1", "miss c=32", "cacheable c=1"):
        print(
            f"{row}: without redis {res[f'{row} local']:.0f} µs, with {res[f'{row} redis']:.0f} µs"
            f" CPU per call: +{res[f'{row} added']:.0f} µs, {res[f'{row} share'] * 100:.1f} %"
        )


if __name__ == "__main__":
    main()
