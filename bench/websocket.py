"""Scenario 15: JSON-RPC over WebSocket, as the bittensor SDK,
async-substrate-interface and polkadot.js send it, on the throughput stack.

Targets (``bench/wsload.py`` drives all of them, so every one pays the same
client): the trivial upstream's own WebSocket (a direct connection), bare
``mitmdump --mode reverse`` passing the WebSocket through to it, chainproxy
over WebSocket, chainproxy over HTTP (POSTs, the same calls), and with
``--before`` the other checkout's chainproxy over both. Shapes: 32 sockets
with one call in flight each (HTTP: 32 connections), one socket with 32 calls
in flight (HTTP cannot), one socket with one call (HTTP: one connection).
Workloads: **hit** (``chain_getHeader`` at a block hash, cached), **miss**
(``state_getStorage`` of a key nobody asked before: pinned to the head, sent
upstream, stored; read at the head's hash, as head pinning sends it, so every
run caches alike whatever the proxy knows of the head) and **mix** (half of
each). Every (target, workload) of a shape runs once per repetition, the
order rotated each repetition; medians; the proxy's CPU per call from
``/proc`` (utime+stime ÷ calls answered)."""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
from dataclasses import dataclass

from bench.context import Context
from bench.load import LoadResult, parse_result
from bench.measure import RPC_PATH, Run, Target, cpu_req, errors, p50, ratio, rps
from bench.report import f0, f2, f3
from bench.stack import REPO, http_json
from bench.throughput import Throughput

WORKLOADS = {"hit": 0.0, "miss": 1.0, "mix": 0.5}  # share of distinct calls
WALL_S = (60.0, 180.0)  # what the scenario adds to a run: quick, full (the runner's alarm)


@dataclass(frozen=True, slots=True)
class Shape:
    name: str
    sockets: int
    concurrency: int
    http: bool  # whether HTTP can take this shape (one call in flight per connection)
    workloads: tuple[str, ...]


SHAPES = (
    Shape("32 sockets, c=32", 32, 32, True, ("hit", "miss", "mix")),
    Shape("1 socket, c=32", 1, 32, False, ("hit", "miss")),
    Shape("1 socket, c=1", 1, 1, True, ("hit", "miss")),
)
# the baselines run hit and miss only (the mix of a pass-through is the same work)
BASELINE_WORKLOADS = ("hit", "miss")


@dataclass(frozen=True, slots=True)
class Subject:
    name: str
    target: Target
    ws: bool
    proxy: bool  # chainproxy (the mix and the goals are its)


def head_hash(upstream: str) -> str:
    """The upstream's best block hash (the trivial upstream's chain is frozen)."""
    doc = {"jsonrpc": "2.0", "id": 1, "method": "chain_getBlockHash", "params": []}
    return http_json(upstream, doc)["result"]


def ws_url(target: Target) -> str:
    return "ws://" + target.url.split("://", 1)[1] + RPC_PATH


def plan_runs(subjects: list[Subject], shape: Shape) -> list[tuple[Subject, str]]:
    """The (subject, workload) pairs of one repetition of ``shape``."""
    out = []
    for s in subjects:
        if not s.ws and not shape.http:
            continue
        for w in shape.workloads:
            if s.proxy or w in BASELINE_WORKLOADS:
                out.append((s, w))
    return out


def rotated(items: list, rep: int) -> list:
    k = rep % len(items) if items else 0
    return items[k:] + items[:k]


def run_wsload(
    subject: Subject,
    shape: Shape,
    workload: str,
    seconds: float,
    hit: list,
    kind: str,
    at: str | None,
) -> LoadResult:
    t = subject.target
    url = ws_url(t) if subject.ws else t.url + RPC_PATH
    argv = [
        sys.executable,
        str(REPO / "bench" / "wsload.py"),
        "--url",
        url,
        "--sockets",
        str(shape.sockets if subject.ws else shape.concurrency),
        "--concurrency",
        str(shape.concurrency),
        "--duration",
        str(seconds),
        "--hit",
        json.dumps(hit),
        "--miss-ratio",
        str(WORKLOADS[workload]),
        "--miss-kind",
        kind,
        *(["--at", at] if at else []),
        "--nonce",
        str(random.getrandbits(31)),
        *([] if subject.ws else ["--http"]),
    ]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    return parse_result(out.stdout, f"wsload failed:\n{out.stdout}\n{out.stderr}")


def measure_one(
    subject: Subject,
    shape: Shape,
    workload: str,
    seconds: float,
    hit: list,
    kind: str = "storage",
    at: str | None = None,
) -> Run:
    t = subject.target
    c0 = t.cpu() if t.pids else None
    load = run_wsload(subject, shape, workload, seconds, hit, kind, at)
    cpu = None
    if c0 is not None and load.requests:
        cpu = (t.cpu() - c0) / load.requests * 1e6
    return Run(load, cpu)


class WebSocketBench:
    def __init__(self, tp: Throughput) -> None:
        self.tp = tp
        self.ctx: Context = tp.ctx

    def subjects(self) -> list[Subject]:
        ts = self.tp.targets
        out = [
            Subject("direct WS", ts["direct"], True, False),
            Subject("bare mitmdump WS", ts["bare"], True, False),
            Subject("chainproxy WS", ts["chainproxy"], True, True),
            Subject("chainproxy HTTP", ts["chainproxy"], False, True),
        ]
        if "before" in ts:
            out += [
                Subject("before WS", ts["before"], True, True),
                Subject("before HTTP", ts["before"], False, True),
            ]
        return out

    def run(self) -> None:
        p = self.ctx.p
        print("\n[15] JSON-RPC over WebSocket: hits and misses, 1 and 32 sockets", flush=True)
        hit = ["chain_getHeader", [self.tp.pinned_hash]]
        at = head_hash(self.tp.trivial)  # misses read at the head: stored, as pinned reads are
        reps = 3 if p.extras else 1  # full / quick (and smoke)
        seconds = 1.25 if p.extras else 0.15 if p.smoke else 1.0
        subjects = self.subjects()
        results: dict[tuple[str, str, str], list[Run]] = {}
        for s in subjects:  # warm: sockets, upstream connections, the hit in the cache
            if not p.smoke:
                measure_one(s, SHAPES[0] if s.ws else SHAPES[2], "hit", 0.5, hit, at=at)
        for shape in SHAPES:
            pairs = plan_runs(subjects, shape)
            for rep in range(reps):
                for s, w in rotated(pairs, rep):
                    run = measure_one(s, shape, w, seconds, hit, at=at)
                    results.setdefault((shape.name, s.name, w), []).append(run)
        self.report(results)

    def report(self, results: dict[tuple[str, str, str], list[Run]]) -> None:
        r = self.ctx.report

        def get(shape: str, subject: str, w: str) -> list[Run]:
            return results.get((shape, subject, w), [])

        for shape in SHAPES:
            for w in shape.workloads:
                ws = get(shape.name, "chainproxy WS", w)
                base = get(shape.name, "bare mitmdump WS", w)
                http = get(shape.name, "chainproxy HTTP", w)
                direct = get(shape.name, "direct WS", w)
                subj = (
                    f"chainproxy WS {f0(rps(ws))} calls/s, {f0(cpu_req(ws))} µs CPU/call, "
                    f"p50 {f3(p50(ws))} ms"
                )
                bits = []
                if base:
                    bits.append(
                        f"bare WS {f0(rps(base))}/s {f0(cpu_req(base))} µs p50 {f3(p50(base))}"
                    )
                if http:
                    bits.append(
                        f"chainproxy HTTP {f0(rps(http))}/s {f0(cpu_req(http))} µs "
                        f"p50 {f3(p50(http))}"
                    )
                if direct:
                    bits.append(f"direct {f0(rps(direct))}/s p50 {f3(p50(direct))}")
                for b in ("before WS", "before HTTP"):
                    x = get(shape.name, b, w)
                    if x:
                        bits.append(f"{b} {f0(rps(x))}/s {f0(cpu_req(x))} µs p50 {f3(p50(x))}")
                # the ratio: throughput over the pass-through (or over HTTP for the mix)
                x = ratio(rps(ws), rps(base)) if base else ratio(rps(ws), rps(http))
                r.row(f"15. WS {w}, {shape.name}", "; ".join(bits), subj, f2(x))
        a = SHAPES[0].name
        hit_cpu = cpu_req(get(a, "chainproxy WS", "hit"))
        miss_cpu = cpu_req(get(a, "chainproxy WS", "miss"))
        one = cpu_req(get(SHAPES[1].name, "chainproxy WS", "hit"))
        c1 = cpu_req(get(SHAPES[2].name, "chainproxy WS", "hit"))
        r.goal(
            f"Goal 15a (WebSocket cache hit ≤ 250 µs of proxy CPU per call): {f0(hit_cpu)} µs"
            f" over 32 sockets, {f0(one)} µs over 1 socket (c=32), {f0(c1)} µs at c=1"
            f"  [HTTP hit {f0(cpu_req(get(a, 'chainproxy HTTP', 'hit')))} µs; bare mitmdump"
            f" passing WS through {f0(cpu_req(get(a, 'bare mitmdump WS', 'hit')))} µs]"
        )
        r.goal(
            f"Goal 15b (WebSocket miss ≤ 2 x the hit, proxy CPU per call): "
            f"{f2(ratio(miss_cpu, hit_cpu))}  [miss {f0(miss_cpu)} µs, hit {f0(hit_cpu)} µs,"
            f" 32 sockets; errors {sum(errors(v) for v in results.values())}]"
        )
        before = get(a, "before WS", "hit")
        if before:
            r.goal(
                "Before/after (WebSocket hit, 32 sockets, proxy CPU per call): before "
                f"{f0(cpu_req(before))} µs, now {f0(hit_cpu)} µs "
                f"({f2(ratio(hit_cpu, cpu_req(before)))}); miss before "
                f"{f0(cpu_req(get(a, 'before WS', 'miss')))} µs, now {f0(miss_cpu)} µs"
            )
        r.data["websocket"] = {
            "|".join(k): {
                "rps": rps(v),
                "cpu_us_per_call": cpu_req(v),
                "p50_ms": p50(v),
                "errors": errors(v),
                "reps_cpu_us": [x.cpu_us_per_req for x in v],
                "reps_rps": [round(x.load.rps, 1) for x in v],
            }
            for k, v in results.items()
        }
        spread = [
            max(x) / min(x)
            for v in results.values()
            if len(x := [y.cpu_us_per_req for y in v if y.cpu_us_per_req]) > 1
        ]
        if spread:
            r.data["websocket_cpu_spread_median"] = statistics.median(spread)
