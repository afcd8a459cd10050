"""Where a worker's CPU goes, beside one process: scenario 10's stack (one
process without Redis; two workers sharing Redis behind HAProxy), driven at
c=32 with scenario 10's identical call and with distinct calls, each process
sampled by py-spy meanwhile.

    python bench/worker_profile.py [--seconds 8] [--reps 3]

First the throughput of 1 process and of 2 workers + HAProxy, alternately,
``--reps`` times, for both bodies (no profiler: the ratio); then one profiled
run of each, printing µs of CPU per answered call by part of the stack
(``bench/profile.py``'s parts, plus Redis's client ``addon/redislink``) for the
one process and for each worker.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.context import FULL, Context
from bench.profile import _part
from bench.redis_scale import H1, H2, ONE, RED, RedisScale
from bench.redis_stack import cpu_seconds, xff_load
from bench.report import Report
from bench.stack import BIN

REDIS_PART = "Redis client (addon/redislink, addon/quota/redis_limiter)"


def part(stack: str) -> str:
    if "(addon/redislink/" in stack or "redis_limiter.py" in stack:
        return REDIS_PART
    return _part(stack)


def profile(pids: list[int], url: str, seconds: float, distinct: bool, out: Path) -> dict:
    """py-spy on each pid while wrk drives ``url``: µs per answered call by part."""
    pyspy = str(BIN / "py-spy")
    box: dict = {}
    load = threading.Thread(
        target=lambda: box.setdefault(
            "load", xff_load(url, b"{}", connections=32, duration_s=seconds + 1, distinct=distinct)
        )
    )
    load.start()
    spies = [
        subprocess.Popen(
            [
                *(pyspy, "record", "-p", str(pid), "-d", str(int(seconds)), "-r", "250"),
                *("--format", "raw", "-o", str(out.with_suffix(f".{pid}.txt"))),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for pid in pids
    ]
    for s in spies:
        s.wait(seconds + 60)
    load.join()
    calls = box["load"].rps * seconds
    res = {"rps": round(box["load"].rps)}
    for pid in pids:
        parts: Counter[str] = Counter()
        for line in out.with_suffix(f".{pid}.txt").read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            if n.isdigit():
                parts[part(stack)] += int(n)
        res[pid] = {k: round(v * 4000 / calls) for k, v in parts.most_common()}
        res[pid]["total"] = round(sum(parts.values()) * 4000 / calls)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--profile", action="store_true", help="also the py-spy runs")
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="chainproxy-workers-") as tmp:
        ctx = Context(FULL, Path(tmp), Report())
        if len(cpus) >= 2:
            os.sched_setaffinity(0, {cpus[0]})
        rs = RedisScale(ctx)
        if rs.skip:
            print(rs.skip)
            return 2
        try:
            rs.start()
            one, two = rs.sides[ONE], rs.sides[H2]
            for side in (one, two):
                xff_load(side.url, b"{}", connections=32, duration_s=2, distinct=True)
            sides = [rs.sides[k] for k in (ONE, RED, H1, H2)]
            for distinct in (False, True):
                rates: dict[str, list[float]] = {x.name: [] for x in sides}
                cpu: dict[str, list[float]] = {x.name: [] for x in sides}
                for rep in range(args.reps):
                    k = rep % len(sides)
                    for side in sides[k:] + sides[:k]:
                        pids = side.parts["proxy"]
                        c0 = sum(cpu_seconds(p) for p in pids)
                        load = xff_load(
                            side.url, b"{}", connections=32, duration_s=3, distinct=distinct
                        )
                        used = sum(cpu_seconds(p) for p in pids) - c0
                        rates[side.name].append(load.rps)
                        cpu[side.name].append(used / max(1, load.requests) * 1e6)
                base = statistics.median(rates[ONE])
                print(
                    f"{'distinct' if distinct else 'identical'}: "
                    + "; ".join(
                        f"{x.name} {statistics.median(rates[x.name]):.0f} calls/s "
                        f"({statistics.median(cpu[x.name]):.0f} µs proxy CPU/call, "
                        f"÷ 1 process {statistics.median(rates[x.name]) / base:.2f})"
                        for x in sides
                    ),
                    flush=True,
                )
            if not args.profile:
                return 0
            for distinct in (False, True):
                name = "distinct" if distinct else "identical"
                for side in (one, two):
                    res = profile(
                        side.parts["proxy"],
                        side.url,
                        args.seconds,
                        distinct,
                        Path(tmp) / f"{name}-{side.name.replace(' ', '_')}",
                    )
                    print(f"profile, {name}, {side.name}: {res}", flush=True)
        finally:
            ctx.stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
