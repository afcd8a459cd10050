"""``make bench``: chainproxy measured side by side with bare mitmdump, a direct
call and nginx, on 127.0.0.1, plus the statistics, memory and addon benchmarks.

    python bench/run.py [--quick | --smoke] [--only 1,2,addon] [--json PATH]

Starts its own upstreams (``bench/trivial_upstream.py``: a fast JSON-RPC server
over a frozen simulated chain; three ``simnode`` nodes for the fault
scenarios), the sidecar, chainproxy (mitmdump + addon; also in lean mode), bare
``mitmdump --mode reverse`` with no addon, and nginx (one worker) where it is
installed; scenario 10 (``bench/redis_scale.py``) runs its own stack with a
redis-server, N proxy processes and HAProxy, after the others are stopped;
scenario 12 (``bench/real_client_sync.py``) runs chopsticks, two chainproxy
processes and async-substrate-interface clients in a process of its own;
scenario 13 (``bench/heavy_neighbours.py``) light and heavy clients on nodes
whose answers take time per MiB, the quota in units and in calls; scenario 14
(``bench/upstream_limits.py``) nodes that rate-limit the proxy (429 beyond a
budget it is not told), with ``proxy.upstream_limits`` off and on; scenario 15
(``bench/websocket.py``) JSON-RPC over WebSocket, hits and misses over 1 and 32
sockets, against HTTP, bare mitmdump passing it through and a direct
connection; scenario 16 (``bench/true_miss.py``) distinct calls that really
miss, beside scenario 1's coalesced identical call; scenario 17
(``bench/validator_fleet.py``) a validator fleet syncing at every block, pre-warm
on and off; scenario 18 (``bench/cross_check_cost.py``) the cross-check's extra
upstream calls; scenarios 19 and 20 (``bench/new_spec_scenarios.py``) the new
spec chainproxy serves: ``chainHead_v1_follow`` fan-out beside legacy heads,
one ``chainHead_v1_storage`` of 100 keys against 100 ``state_getStorage``.
Drives them with ``wrk`` (or ``bench/pyload.py`` without it). On a
machine with two or more cores every proxy under test is pinned to core 1 and
everything else (load generator, upstreams, sidecar, this runner) to core 0, so
the proxy's core is its own and the load generator does not steal from it.

Each scenario runs its targets alternately (the order rotates every
repetition) and reports medians over the repetitions; ratios are taken between
medians measured in the same run. Prints one table and one line per goal; a
full run takes ~11 minutes, ``--quick`` under 3. Every process is started here
and stopped here (also on Ctrl-C), and each has a time limit of its own.

A scenario fails when it raises, when a script of its own exits non-zero or
prints no result, when a stack it needs did not start, when it reports a
figure as ``?`` or no figure at all, or when it says it could not measure
(``Report.fail``); the others still run, the report is still printed, and the
run exits 1, naming the failed scenarios last. ``--smoke`` runs every scenario
once at its smallest size (no pinning, seconds per scenario, no figure worth
reading): does every benchmark still run? ``tests/bench/test_bench_smoke.py``
runs it in ``make test``.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import scripts
from bench.context import CPUS, FULL, QUICK, SMOKE, Context
from bench.cross_check_cost import WALL_S as CROSS_CHECK_WALL_S
from bench.cross_check_cost import CrossCheckCost
from bench.faults import FaultBench
from bench.heavy_neighbours import HeavyNeighbours
from bench.load import generator
from bench.new_spec_scenarios import (
    FOLLOW_WALL_S,
    STORAGE_WALL_S,
    chain_head_storage,
    follow_fanout,
)
from bench.real_client_sync import bench_step as real_client_sync
from bench.redis_scale import RedisScale
from bench.report import Report
from bench.smoke import lanes, run_lanes
from bench.stack import nginx_path
from bench.steps import SCENARIOS, Step, WallLimit, conclude, run_steps, wall_limit
from bench.throughput import Throughput
from bench.true_miss import WALL_S as TRUE_MISS_WALL_S
from bench.true_miss import TrueMiss
from bench.upstream_calls import UpstreamCalls
from bench.upstream_limits import UpstreamLimits
from bench.upstream_limits import wall_s as upstream_limits_wall_s
from bench.validator_fleet import WALL_S as FLEET_WALL_S
from bench.validator_fleet import ValidatorFleet
from bench.websocket import WALL_S as WS_WALL_S
from bench.websocket import WebSocketBench


def machine() -> dict[str, Any]:
    model = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        platform.processor(),
    )
    versions = {}
    for tool, argv in (("wrk", ["wrk", "-v"]), ("nginx", [nginx_path() or "nginx", "-v"])):
        try:
            res = subprocess.run(argv, capture_output=True, text=True, timeout=5)
            text = (res.stdout + res.stderr).strip().splitlines()
            versions[tool] = text[0] if text else "?"
        except (OSError, subprocess.TimeoutExpired):
            versions[tool] = "not installed"
    import aiohttp
    import mitmproxy.version

    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "mitmproxy": mitmproxy.version.VERSION,
        "aiohttp": aiohttp.__version__,
        "load generator": generator(),
        **versions,
        "loadavg": os.getloadavg(),
    }


def plan(ctx: Context, only: set[str], before: Path | None) -> list[Step]:
    """The steps of this run, in order: each stack is set up only when one of its
    scenarios runs, and stopped before the scripts that want the cores alone."""
    steps: list[Step] = []
    if only & {"1", "2", "3", "15", "16", "7"}:
        tp = Throughput(ctx, before)
        setup = "setup: trivial upstream, sidecar, proxies"
        steps.append(Step(setup, tp.start))
        steps += [
            Step(k, f, setup)
            for k, f in (
                ("1", tp.miss_path),
                ("2", tp.hit_path),
                ("3", tp.latency),
                ("15", WebSocketBench(tp).run),  # WebSocket: hits, misses, 1 and 32 sockets
                ("16", TrueMiss(tp).run),  # distinct calls that really miss, c=32
                ("7", tp.scale_out),  # last: it adds a process to core 0
            )
            if k in only
        ]
    if only & {"4", "5"}:
        fb = FaultBench(ctx)
        setup = "setup: simulated nodes, sidecar, proxies"
        steps.append(Step(setup, fb.start))
        steps += [
            Step(k, f, setup)
            for k, f in (("4", fb.slow_upstream), ("5", fb.killed_upstream))
            if k in only
        ]
    steps.append(Step("stop the stacks", ctx.stack.stop))
    # each of these a stack of its own: set up, the scenario, stopped
    own: list[tuple[str, str, Callable[[Context], Any]]] = [
        # simulated nodes with fast blocks, four proxies of its own
        ("11", "simulated nodes, sidecar, chainproxy on/off, bare mitmdump", UpstreamCalls),
        # simulated nodes slow per MiB, light and heavy clients, two proxies
        ("13", "byte-slow simulated nodes, sidecar, chainproxy units/counting", HeavyNeighbours),
        # rate-limiting simulated nodes, four proxies (upstream_limits off/on)
        ("14", "rate-limiting simulated nodes, sidecar, chainproxy before/after", UpstreamLimits),
        # issue 25: a validator fleet with pre-warm on/off; the cross-check's cost
        ("17", "simulated nodes with fast blocks, sidecar, pre-warm on/off", ValidatorFleet),
        ("18", "simulated nodes, sidecar, cross-check on/off", CrossCheckCost),
    ]
    for k, what, scenario in own:
        if k in only:
            sc = scenario(ctx)
            steps += [
                Step(f"setup {k}: {what}", sc.start),
                Step(k, sc.run, f"setup {k}: {what}"),
                Step(f"stop {k}", ctx.stack.stop),
            ]
    if "12" in only:  # chopsticks, real clients and two proxies, in a process of its own
        steps.append(Step("12", partial(real_client_sync, ctx)))
    if "10" in only:  # a stack of its own, alone on the machine
        rs = RedisScale(ctx)
        setup = "setup 10: redis-server, sidecar, workers, HAProxy"
        steps += [
            Step(setup, rs.start),
            Step("10", rs.run, setup),
            Step("stop the Redis stack", ctx.stack.stop),
        ]
    steps += [
        Step(k, partial(f, ctx))
        for k, f in (
            ("6", scripts.stats),
            ("8", scripts.memory),
            ("9", scripts.fanout),
            ("19", follow_fanout),  # after 9: it prints 9's figure beside its own
            ("20", chain_head_storage),
            ("addon", scripts.addon_cpu),
        )
        if k in only
    ]
    return steps


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer and shorter runs (< 3 min)")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="every scenario once at its smallest size, nothing pinned: does it still run?",
    )
    ap.add_argument(
        "--jobs",
        type=int,
        help="with --smoke: runners side by side (default 3; bench/smoke.py); timed runs: 1",
    )
    ap.add_argument(
        "--only",
        default="",
        help="comma-separated scenarios: 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,addon",
    )
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument(
        "--before",
        type=Path,
        help="another checkout of the project (e.g. `git archive <commit> | tar -x -C DIR`):"
        " its addon is measured too, as 'chainproxy before', in scenarios 1-3 and 15",
    )
    return ap


def main() -> int:
    ap = _parser()
    args = ap.parse_args()
    if args.quick and args.smoke:
        ap.error("--quick or --smoke, not both")
    p = SMOKE if args.smoke else QUICK if args.quick else FULL
    only = set(args.only.split(",")) if args.only else set(SCENARIOS)
    if unknown := only - set(SCENARIOS):
        ap.error(f"no such scenario: {', '.join(sorted(unknown))}")
    jobs = args.jobs or (3 if args.smoke and not args.before else 1)
    if jobs > 1 and (not args.smoke or args.before):
        ap.error("--jobs > 1 only with --smoke and without --before: timed scenarios run alone")
    parallel = len(lanes(only, jobs)) > 1
    signal.signal(signal.SIGALRM, wall_limit)
    extra = 0.0
    if not args.smoke:  # a smoke run's limit is its own
        # scenario 14 brings its own time: its runs are open-loop and fixed in length
        extra = upstream_limits_wall_s(args.quick) if "14" in only else 0.0
        for k, wall in (
            ("15", WS_WALL_S),
            ("16", TRUE_MISS_WALL_S),
            ("17", FLEET_WALL_S),
            ("18", CROSS_CHECK_WALL_S),
            ("19", FOLLOW_WALL_S),
            ("20", STORAGE_WALL_S),
        ):
            # with --before scenario 15 runs half as many targets again
            extra += wall[not args.quick] * (1.5 if args.before else 1) if k in only else 0.0
    signal.alarm(int(p.wall_limit_s + extra + (60 if parallel else 0)))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if len(CPUS) >= 2 and not args.smoke:
        os.sched_setaffinity(0, {min(CPUS)})  # children inherit; proxies go to the last core

    started = time.monotonic()
    info = machine()
    size = " (smoke: smallest sizes, figures not worth reading)" if args.smoke else ""
    print("chainproxy benchmarks" + (" (quick)" if args.quick else size))
    for k, v in info.items():
        print(f"  {k}: {v}")
    if info["load generator"] != "wrk":
        print("  (wrk not found: using bench/pyload.py, which costs more CPU; make bench-deps)")
    if not nginx_path():
        print(
            "  (nginx not found: no nginx reference or round-robin baseline; scale-out"
            " balanced by HAProxy; make bench-deps)"
        )
    report = Report()
    report.data["machine"] = info
    report.data["size"] = "smoke" if args.smoke else "quick" if args.quick else "full"
    with tempfile.TemporaryDirectory(prefix="chainproxy-bench-") as tmp:
        ctx = Context(p, Path(tmp), report)
        try:
            if parallel:
                print(f"  ({jobs} runners side by side: bench/smoke.py)", flush=True)
                run_lanes(only, jobs, Path(tmp), report)
            else:
                run_steps(plan(ctx, only, args.before.resolve() if args.before else None), report)
        except WallLimit:
            print(f"  (the run's wall limit, {p.wall_limit_s + extra:.0f} s, ended it)")
            for k in sorted(only - set(report.data.get("scenarios", {}))):
                report.fail("not run to its end: the run's wall limit", k)
        finally:
            ctx.stack.stop()
            signal.alarm(0)
    report.data["elapsed_s"] = round(time.monotonic() - started, 1)
    return conclude(report, args.json)


if __name__ == "__main__":
    sys.exit(main())
