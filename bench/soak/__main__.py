"""``python -m bench.soak [--seconds 600]`` (``make soak SOAK_S=600``): the
stack, the clients and the chaos for that long; then the figures, printed and
written into docs/RELIABILITY.md (``--no-write`` to leave it). Exit code 1
when a goal is missed (errors while a healthy upstream existed, usage records
lost or doubled, a head subscription with a gap or a duplicate)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.soak.chaos import Chaos
from bench.soak.plan import Action, schedule
from bench.soak.report import Result, figures, render, write
from bench.soak.stack import SoakStack
from bench.soak.tally import Tally
from bench.soak.traffic import Clients
from bench.soak.ws_clients import WsClient, subscriptions_for

REPO = Path(__file__).resolve().parents[2]
HTTP_CLIENTS = 6
WS_CLIENTS = 4


def usage_requests(sidecar_url: str) -> int | None:
    try:
        with urllib.request.urlopen(f"{sidecar_url}/api/v1/usage", timeout=5) as resp:
            return int(json.load(resp)["requests"])
    except (OSError, ValueError, KeyError):
        return None


async def settle_usage(sidecar_url: str, expected: int, timeout_s: float = 90.0) -> int | None:
    """The sidecar's count once it stops moving (spools drained), or at the timeout."""
    deadline = time.monotonic() + timeout_s
    last, stable_since = None, time.monotonic()
    while time.monotonic() < deadline:
        n = await asyncio.to_thread(usage_requests, sidecar_url)
        if n != last:
            last, stable_since = n, time.monotonic()
        elif n is not None and (n >= expected or time.monotonic() - stable_since > 15):
            return n
        await asyncio.sleep(1.0)
    return last


async def soak(
    stack: SoakStack, seconds: float, seed: int, actions: list[Action] | None = None
) -> Result:
    """Traffic for ``seconds`` with the chaos of ``actions`` (by default the
    seeded ``schedule``); the figures once the clients stopped."""
    if actions is None:
        actions = schedule(seconds, list(stack.nodes), seed=seed, redis=stack.with_redis)
    started = time.monotonic()
    tally = Tally()
    clients = Clients(stack.url, tally, seed=seed, started=started)
    tasks = [
        asyncio.create_task(clients.http_client(f"127.0.0.{10 + i}", pause_s=0.25))
        for i in range(HTTP_CLIENTS)
    ]
    tasks.append(asyncio.create_task(clients.greedy_client("127.0.0.99", every_s=15, burst=600)))
    for i in range(WS_CLIENTS):
        ws = WsClient(clients, f"127.0.0.{30 + i}", f"ws{i + 1}", subscriptions_for(i))
        tasks.append(asyncio.create_task(ws.run(pause_s=0.5)))
    chaos = Chaos(stack, started, tally)
    chaos_task = asyncio.create_task(chaos.run(actions))
    warm_s = min(60.0, seconds * 0.2)
    await asyncio.sleep(warm_s)
    warm = stack.resources()
    await asyncio.sleep(max(0.0, seconds - warm_s))
    end = stack.resources()
    clients.stopping.set()
    await asyncio.wait(tasks, timeout=40)
    for t in tasks:
        t.cancel()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(chaos_task, 30)
    expected = tally.counts()["recorded"]
    records = await settle_usage(stack.sidecar_url, expected)
    return Result(
        seconds=seconds,
        seed=seed,
        nodes=len(stack.nodes),
        redis=stack.with_redis,
        tally=tally,
        actions=actions,
        restarts=dict(stack.restarts),
        usage_records=records,
        resources_warm=warm,
        resources_end=end,
        warm_s=warm_s,
        chaos_failures=chaos.failures,
        upstream_429=chaos.upstream_429,
    )


def goals_met(r: Result) -> bool:
    f = figures(r)
    return (
        f["counts"].get("error", 0) == 0
        and f["usage_records"] == f["counts"]["recorded"]
        and f["heads"]["with_gap"] == 0
        and f["heads"]["with_duplicate"] == 0
        and f["sockets_closed_unexplained"] == 0
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--no-redis", action="store_true", help="no Redis (and no Redis restarts)")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "RELIABILITY.md")
    ap.add_argument("--no-write", action="store_true", help="print only")
    ap.add_argument("--keep", action="store_true", help="keep the logs' directory")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="soak: %(message)s")
    tmp = Path(tempfile.mkdtemp(prefix="chainproxy-soak-"))
    stack = SoakStack(tmp, node_count=args.nodes, with_redis=not args.no_redis)
    try:
        stack.start()
        print(f"soak: {args.seconds:.0f} s, seed {args.seed}, logs in {tmp}", flush=True)
        result = asyncio.run(soak(stack, args.seconds, args.seed))
    finally:
        stack.stop()
    text = render(result)
    print(text)
    if not args.no_write:
        write(args.out, text)
    ok = goals_met(result)
    print("soak: goals met" if ok else "soak: a goal was missed (see above)")
    if not args.keep and ok:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
