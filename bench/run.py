"""``make bench``: chainproxy measured side by side with bare mitmdump, a direct
call and nginx, on 127.0.0.1, plus the statistics, memory and addon benchmarks.

    python bench/run.py [--quick] [--only 1,2,lean] [--json PATH]

Starts its own upstreams (``bench/trivial_upstream.py``: a fast JSON-RPC server
over a frozen simulated chain; three ``simnode`` nodes for the fault
scenarios), the sidecar, chainproxy (mitmdump + addon; also in lean mode), bare
``mitmdump --mode reverse`` with no addon, and nginx (one worker) where it is
installed; drives them with ``wrk`` (or ``bench/pyload.py`` without it). On a
machine with two or more cores every proxy under test is pinned to core 1 and
everything else (load generator, upstreams, sidecar, this runner) to core 0, so
the proxy's core is its own and the load generator does not steal from it.

Each scenario runs its targets alternately (the order rotates every
repetition) and reports medians over the repetitions; ratios are taken between
medians measured in the same run. Prints one table and one line per goal; a
full run takes ~9 minutes, ``--quick`` under 2. Every process is started here
and stopped here (also on Ctrl-C), and each has a time limit of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.load import LoadResult, generator, run_load
from bench.stack import (
    NGINX_STREAM_MODULE,
    REPO,
    Stack,
    http_json,
    nginx_path,
    post_raw,
)
from bench.trivial_upstream import START_HEIGHT
from chainproxy.supervisor import wait_http, wait_port

CPUS = frozenset(os.sched_getaffinity(0))  # before this runner pins itself
RPC_PATH = "/rpc/v1/finney"
BARE, CP, LEAN = "bare mitmdump", "chainproxy", "chainproxy lean"
PLAIN, NGINX = "chainproxy, mitmproxy's dispatch", "nginx (1 worker)"
RR = "nginx round robin"
BEFORE = "chainproxy before"
SLOW_RATE = 200  # req/s in the slow-upstream scenario: ~40% of one chainproxy process
MISS_BODY = b'{"jsonrpc":"2.0","id":0,"method":"chain_getHeader","params":[]}'
# for the fault scenarios: a read the sidecar's probes never send, so the nodes'
# per-method counters tell which node served the benchmark's calls
FAULT_METHOD = "state_getRuntimeVersion"
FAULT_BODY = json.dumps({"jsonrpc": "2.0", "id": 0, "method": FAULT_METHOD, "params": []}).encode()


@dataclass(frozen=True)
class Params:
    reps: int  # repetitions of the throughput/latency scenarios
    scale_reps: int  # repetitions of the scale-out scenario
    tput_s: float  # seconds per throughput run
    lat_s: float  # seconds per concurrency-1 run
    fault_reps: int  # repetitions (healthy/slow pairs) of the slow-upstream scenario
    kill_reps: int  # repetitions of the killed-upstream scenario
    slow_s: float
    kill_s: float
    warm_s: float
    mem_clients: int
    stats_quick: bool
    extras: bool  # also measure the references (nginx, mitmproxy's own dispatch)
    wall_limit_s: float  # the runner stops itself after this


FULL = Params(
    reps=5,
    scale_reps=4,
    tput_s=3,
    lat_s=2,
    fault_reps=6,
    kill_reps=3,
    slow_s=4,
    kill_s=8,
    warm_s=1,
    mem_clients=1_000_000,
    stats_quick=False,
    extras=True,
    wall_limit_s=900,
)
QUICK = Params(
    reps=2,
    scale_reps=1,
    tput_s=2,
    lat_s=1,
    fault_reps=1,
    kill_reps=1,
    slow_s=2,
    kill_s=3,
    warm_s=0,
    mem_clients=150_000,
    stats_quick=True,
    extras=False,
    wall_limit_s=240,
)

# --- measuring ------------------------------------------------------------------------------


def _cpu_seconds(pid: int) -> float:
    """utime+stime of ``pid`` and its direct children (nginx's workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        p = int(stat.parent.name)
        if p == pid or int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


@dataclass
class Target:
    name: str
    url: str  # base URL
    pids: list[int] = field(default_factory=list)  # the processes whose CPU counts

    def cpu(self) -> float:
        return sum(_cpu_seconds(p) for p in self.pids)


@dataclass
class Run:
    load: LoadResult
    cpu_us_per_req: float | None


def measure(
    t: Target, body: bytes, conns: int, seconds: float, tool: str | None = None, rate: float = 0
) -> Run:
    c0 = t.cpu() if t.pids else None
    load = run_load(
        t.url + RPC_PATH, body, connections=conns, duration_s=seconds, tool=tool, rate=rate
    )
    cpu = None
    if c0 is not None and load.requests:
        cpu = (t.cpu() - c0) / load.requests * 1e6
    return Run(load, cpu)


def alternate(
    targets: list[Target], body: bytes, conns: int, seconds: float, reps: int, warm_s: float
) -> dict[str, list[Run]]:
    """Every target once per repetition, the order rotated each time."""
    for t in targets:
        if warm_s > 0:
            run_load(t.url + RPC_PATH, body, connections=conns, duration_s=warm_s)
    out: dict[str, list[Run]] = {t.name: [] for t in targets}
    for rep in range(reps):
        order = targets[rep % len(targets) :] + targets[: rep % len(targets)]
        for t in order:
            out[t.name].append(measure(t, body, conns, seconds))
    return out


def med(runs: list[Run], key: Callable[[Run], float | None]) -> float | None:
    values = [v for v in (key(r) for r in runs) if v is not None]
    return statistics.median(values) if values else None


def rps(runs: list[Run]) -> float | None:
    return med(runs, lambda r: r.load.rps)


def p50(runs: list[Run]) -> float | None:
    return med(runs, lambda r: r.load.p50_ms)


def p99(runs: list[Run]) -> float | None:
    return med(runs, lambda r: r.load.p99_ms)


def cpu_req(runs: list[Run]) -> float | None:
    return med(runs, lambda r: r.cpu_us_per_req)


def errors(runs: list[Run]) -> int:
    return sum(r.load.errors for r in runs)


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


# --- report ---------------------------------------------------------------------------------


@dataclass
class Report:
    rows: list[tuple[str, str, str, str]] = field(default_factory=list)  # what, base, subj, ratio
    goals: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def row(self, what: str, base: str, subject: str, r: str) -> None:
        self.rows.append((what, base, subject, r))
        print(f"  {what}: {base} | {subject} | {r}", flush=True)

    def goal(self, line: str) -> None:
        self.goals.append(line)

    def print(self) -> None:
        w = [max(len(r[i]) for r in [*self.rows, HEAD]) for i in range(4)]
        print()
        for i, r in enumerate([HEAD, *self.rows]):
            print("| " + " | ".join(c.ljust(w[j]) for j, c in enumerate(r)) + " |")
            if i == 0:
                print("|" + "|".join("-" * (x + 2) for x in w) + "|")
        print()
        for g in self.goals:
            print(g)


HEAD = ("scenario", "baseline", "subject", "ratio")


def f0(x: float | None, unit: str = "") -> str:
    return "n/a" if x is None else f"{x:,.0f}{unit}"


def f2(x: float | None, unit: str = "") -> str:
    return "n/a" if x is None else f"{x:.2f}{unit}"


def f3(x: float | None, unit: str = "") -> str:
    return "n/a" if x is None else f"{x:.3f}{unit}"


def tput(name: str, runs: list[Run]) -> str:
    return f"{name} {f0(rps(runs))} req/s ({f0(cpu_req(runs))} µs CPU/req)"


# --- the stacks -----------------------------------------------------------------------------


class Bench:
    def __init__(self, p: Params, tmp: Path, report: Report, before: Path | None = None) -> None:
        self.p = p
        self.before = before  # another checkout, measured as "chainproxy before"
        self.tmp = tmp
        self.report = report
        self.stack = Stack(tmp)
        cpus = sorted(CPUS)
        # proxies under test on the last core, everything else on the first
        self.proxy_cpus: set[int] | None = {cpus[-1]} if len(cpus) >= 2 else None
        self.other_cpus: set[int] | None = {cpus[0]} if len(cpus) >= 2 else None
        self.nginx = nginx_path()
        self.targets: dict[str, Target] = {}
        self.trivial = ""
        self.config_a: Path | None = None
        self.sidecar_a = ""
        self.pinned_hash = ""

    # trivial upstream, sidecar, chainproxy (default, lean, mitmproxy's own dispatch),
    # bare mitmdump, nginx
    def start_throughput_stack(self) -> None:
        st, cpus = self.stack, self.proxy_cpus
        self.trivial = st.start_trivial(self.p.wall_limit_s + 60)
        self.targets["direct"] = Target("direct call", self.trivial)
        self.config_a, self.sidecar_a = st.write_config(
            "trivial", [self.trivial], data_dir=self.tmp / "data-a"
        )
        st.start_sidecar("sidecar-a", self.config_a, self.sidecar_a)
        variants: list[tuple[str, str, tuple[str, ...], Path | None]] = [
            ("chainproxy", CP, (), None),
            ("lean", LEAN, ("chainproxy_lean=true",), None),
        ]
        if self.p.extras:
            variants.append(("plain", PLAIN, ("chainproxy_fast_dispatch=false",), None))
        if self.before is not None:
            variants.append(("before", BEFORE, (), self.before))
        started = []
        for key, name, sets, tree in variants:
            proc, url = st.start_chainproxy(
                key, self.config_a, self.sidecar_a, sets=sets, cpus=cpus, wait=False, tree=tree
            )
            started.append((key, name, proc, url))
        bare, bare_url = st.start_bare_mitmdump("bare", self.trivial, cpus=cpus, wait=False)
        for key, name, proc, url in started:
            wait_http(f"{url}/rpc/", proc)
            self.targets[key] = Target(name, url, [proc.pid])
        wait_port(int(bare_url.rsplit(":", 1)[1]), bare)
        self.targets["bare"] = Target(BARE, bare_url, [bare.pid])
        if self.nginx and self.p.extras:
            port = self.trivial.rsplit(":", 1)[1]
            proc, nport = st.start_nginx(
                "nginx-ref",
                http=(
                    f"upstream rpc {{ server 127.0.0.1:{port}; keepalive 64; }} "
                    "server { listen 127.0.0.1:{port}; location / { proxy_pass http://rpc; "
                    'proxy_http_version 1.1; proxy_set_header Connection ""; } }'
                ),
                cpus=cpus,
            )
            self.targets["nginx"] = Target(NGINX, f"http://127.0.0.1:{nport}", [proc.pid])
        # a block hash the cache may keep: chain_getHeader(hash) is immutable
        doc = http_json(
            self.trivial,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "chain_getBlockHash",
                "params": [START_HEIGHT - 100],
            },
        )
        self.pinned_hash = doc["result"]
        self.wait_routes(self.sidecar_a, 1)

    def wait_routes(self, sidecar: str, healthy: int, timeout: float = 30.0) -> None:
        """Until the sidecar's routing snapshot has ``healthy`` upstreams in tier 0."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                doc = http_json(f"{sidecar}/api/v1/internal/routes/finney", timeout=2)
                if sum(1 for u in doc["upstreams"] if u["tier"] == 0) >= healthy:
                    time.sleep(1.5)  # the addon refreshes its snapshot every second
                    return
            time.sleep(0.2)
        print(f"  (warning: {sidecar} has not seen {healthy} healthy upstream(s))", flush=True)

    def before_row(
        self,
        what: str,
        runs: dict[str, list[Run]],
        metric: Callable[[list[Run]], float | None],
        unit: str,
    ) -> None:
        """With ``--before``: the same measure for the other checkout, same run."""
        if BEFORE not in runs:
            return
        b, now, bare = metric(runs[BEFORE]), metric(runs[CP]), metric(runs[BARE])
        fmt = f3 if unit == "ms" else f0
        self.report.row(
            f"before/after, {what}",
            f"before {fmt(b)} {unit} (÷ bare {f2(ratio(b, bare))})",
            f"now {fmt(now)} {unit} (÷ bare {f2(ratio(now, bare))})",
            f2(ratio(now, b)),
        )

    def hit_body(self) -> bytes:
        return json.dumps(
            {"jsonrpc": "2.0", "id": 0, "method": "chain_getHeader", "params": [self.pinned_hash]}
        ).encode()

    def throughput_targets(self, *names: str) -> list[Target]:
        return [self.targets[n] for n in names if n in self.targets]

    # --- scenarios 1, 2, 3 and lean mode --------------------------------------------------

    def miss_path(self) -> None:
        p, r = self.p, self.report
        print("\n[1] cache-miss path, 32 connections (+ lean mode, references)", flush=True)
        ts = self.throughput_targets("bare", "chainproxy", "lean", "plain", "before", "nginx")
        runs = alternate(ts, MISS_BODY, 32, p.tput_s, p.reps, p.warm_s)
        bare, cp, lean = runs[BARE], runs[CP], runs[LEAN]
        r1 = ratio(rps(cp), rps(bare))
        rl = ratio(rps(lean), rps(bare))
        r.row("1. miss path, c=32: throughput", tput("bare", bare), tput("chainproxy", cp), f2(r1))
        r.row("lean mode, miss path, c=32", tput("bare", bare), tput("lean", lean), f2(rl))
        if PLAIN in runs:
            r.row(
                "chainproxy with mitmproxy's own dispatch, miss",
                tput("bare", bare),
                tput("chainproxy", runs[PLAIN]),
                f2(ratio(rps(runs[PLAIN]), rps(bare))),
            )
        if NGINX in runs:
            r.row(
                "reference: nginx, miss path, c=32",
                tput("bare", bare),
                tput("nginx", runs[NGINX]),
                f2(ratio(rps(runs[NGINX]), rps(bare))),
            )
        errs = sum(errors(v) for v in runs.values())
        r.goal(
            f"Goal 1 (miss path, chainproxy ÷ bare mitmdump ≥ 0.90): {f2(r1)}"
            f"  [{f0(rps(cp))} vs {f0(rps(bare))} req/s; CPU per request "
            f"{f0(cpu_req(cp))} vs {f0(cpu_req(bare))} µs; errors {errs}"
            + (
                f"; with mitmproxy's own event dispatch {f2(ratio(rps(runs[PLAIN]), rps(bare)))}"
                if PLAIN in runs
                else ""
            )
            + "]"
        )
        r.goal(
            f"Lean mode (miss path, whole pipeline, ÷ bare mitmdump ≥ 1.5): {f2(rl)}"
            f"  [{f0(rps(lean))} req/s, {f0(cpu_req(lean))} µs CPU/req]"
        )
        if NGINX in runs:
            nx = runs[NGINX]
            r.goal(
                f"Reference: nginx (1 worker, keepalive upstream) ÷ bare mitmdump: "
                f"{f2(ratio(rps(nx), rps(bare)))} ({f0(rps(nx))} req/s, {f0(cpu_req(nx))} µs "
                "CPU/req; its load generator and upstream share the other core)"
            )
        self.before_row("miss path, c=32", runs, rps, "req/s")
        r.data["miss"] = _summary(runs)

    def hit_path(self) -> None:
        p, r = self.p, self.report
        print("\n[2] cache-hit path, 32 connections", flush=True)
        body = self.hit_body()
        for key in ("chainproxy", "lean", "plain", "before"):
            if key not in self.targets:
                continue
            url = self.targets[key].url + RPC_PATH
            post_raw(url, body)
            status, headers, _ = post_raw(url, body)
            if status != 200 or headers.get("X-Cache") != "HIT":
                print(f"  (warning: {key} did not answer from the cache: {status} {headers})")
        ts = self.throughput_targets("bare", "chainproxy", "lean", "plain", "before")
        runs = alternate(ts, body, 32, p.tput_s, p.reps, p.warm_s)
        bare, cp, lean = runs[BARE], runs[CP], runs[LEAN]
        r2 = ratio(rps(cp), rps(bare))
        r.row("2. hit path, c=32: throughput", tput("bare", bare), tput("chainproxy", cp), f2(r2))
        r.row(
            "lean mode, hit path, c=32",
            tput("bare", bare),
            tput("lean", lean),
            f2(ratio(rps(lean), rps(bare))),
        )
        if PLAIN in runs:
            r.row(
                "chainproxy with mitmproxy's own dispatch, hit",
                tput("bare", bare),
                tput("chainproxy", runs[PLAIN]),
                f2(ratio(rps(runs[PLAIN]), rps(bare))),
            )
        r.goal(
            f"Goal 2 (hit path, chainproxy ÷ bare mitmdump ≥ 1.25): {f2(r2)}"
            f"  [{f0(rps(cp))} vs {f0(rps(bare))} req/s; lean {f2(ratio(rps(lean), rps(bare)))}"
            + (
                f"; with mitmproxy's own event dispatch {f2(ratio(rps(runs[PLAIN]), rps(bare)))}"
                if PLAIN in runs
                else ""
            )
            + "]"
        )
        self.before_row("hit path, c=32", runs, rps, "req/s")
        r.data["hit"] = _summary(runs)

    def latency(self) -> None:
        p, r = self.p, self.report
        print("\n[3] concurrency 1: p50 latency", flush=True)
        ts = self.throughput_targets(
            "direct", "bare", "chainproxy", "lean", "plain", "before", "nginx"
        )
        runs = alternate(ts, MISS_BODY, 1, p.lat_s, p.reps, p.warm_s)
        d, bare, cp, lean = runs["direct call"], runs[BARE], runs[CP], runs[LEAN]

        def added(x: list[Run]) -> float | None:
            a, b = p50(x), p50(bare)
            return None if a is None or b is None else a - b

        def signed(v: float | None) -> str:
            return "n/a" if v is None else f"{v:+.3f} ms"

        r.row(
            "3. c=1: p50 latency, added over bare",
            f"bare {f3(p50(bare), ' ms')}",
            f"chainproxy {f3(p50(cp), ' ms')}",
            signed(added(cp)),
        )
        r.row(
            "c=1: p50 vs a direct call",
            f"direct {f3(p50(d), ' ms')}",
            f"chainproxy {f3(p50(cp), ' ms')}",
            f2(ratio(p50(cp), p50(d))),
        )
        r.row(
            "lean mode, c=1: p50",
            f"bare {f3(p50(bare), ' ms')}",
            f"lean {f3(p50(lean), ' ms')}",
            signed(added(lean)),
        )
        if PLAIN in runs:
            r.row(
                "chainproxy with mitmproxy's own dispatch, c=1",
                f"bare {f3(p50(bare), ' ms')}",
                f"chainproxy {f3(p50(runs[PLAIN]), ' ms')}",
                signed(added(runs[PLAIN])),
            )
        if NGINX in runs:
            r.row(
                "reference: nginx, c=1: p50",
                f"direct {f3(p50(d), ' ms')}",
                f"nginx {f3(p50(runs[NGINX]), ' ms')}",
                f2(ratio(p50(runs[NGINX]), p50(d))),
            )
        r.goal(
            f"Goal 3 (c=1, added p50 over bare mitmdump ≤ 0.5 ms): {signed(added(cp))}"
            f"  [p50 direct {f3(p50(d))}, bare {f3(p50(bare))}, chainproxy {f3(p50(cp))} ms;"
            f" chainproxy ÷ direct = {f2(ratio(p50(cp), p50(d)))}"
            + (
                f"; with mitmproxy's own event dispatch {signed(added(runs[PLAIN]))}"
                if PLAIN in runs
                else ""
            )
            + "]"
        )
        self.before_row("c=1, p50", runs, p50, "ms")
        r.data["c1"] = _summary(runs)

    # --- scenario 7: two processes behind a TCP balancer ----------------------------------

    def scale_out(self) -> None:
        p, r = self.p, self.report
        print("\n[7] scale-out: two chainproxy processes behind a TCP balancer", flush=True)
        if not self.nginx or not NGINX_STREAM_MODULE.exists():
            r.row("7. scale-out", "n/a", "needs nginx + its stream module", "n/a")
            r.goal("Scale-out: not measured (nginx stream module not installed: make bench-deps)")
            return
        assert self.config_a is not None
        one = self.targets["chainproxy"]
        proc2, url2 = self.stack.start_chainproxy(
            "chainproxy-2", self.config_a, self.sidecar_a, cpus=self.other_cpus
        )
        ports = [one.url.rsplit(":", 1)[1], url2.rsplit(":", 1)[1]]
        servers = " ".join(f"server 127.0.0.1:{x};" for x in ports)
        lb, lport = self.stack.start_nginx(
            "nginx-tcp-balancer",
            stream=f"upstream cps {{ {servers} }} server {{ listen 127.0.0.1:{{port}}; "
            "proxy_pass cps; }",
        )
        two = Target(
            "two processes + TCP balancer", f"http://127.0.0.1:{lport}", [*one.pids, proc2.pid]
        )
        # the second process is new: let it open its upstream connections first
        runs = alternate([one, two], MISS_BODY, 32, p.tput_s, p.scale_reps, max(2.0, p.warm_s))
        a, b = runs[one.name], runs[two.name]
        rs = ratio(rps(b), rps(a))
        r.row("7. scale-out, miss path, c=32", tput("1 process", a), tput("2 processes", b), f2(rs))
        r.goal(
            f"Scale-out (2 processes sharing one diskcache, nginx stream balancer, ÷ 1 process;"
            f" expect ≤ 2): {f2(rs)}  [{f0(rps(b))} vs {f0(rps(a))} req/s; the second process,"
            " the balancer, the load generator and the upstream share the other core]"
        )
        r.data["scale_out"] = _summary(runs)
        proc2.stop()
        lb.stop()

    # --- scenarios 4 and 5: three simulated upstreams --------------------------------------

    def start_fault_stack(self) -> None:
        st = self.stack
        epoch = time.time() - 3600
        self.nodes = [st.start_node(f"sim-{c}", epoch=epoch, wait=False) for c in "abc"]
        for n in self.nodes:
            wait_http(f"{n.url}/_sim/state", n.proc)
        self.config_b, self.sidecar_b = st.write_config(
            "sim",
            [n.url for n in self.nodes],
            data_dir=self.tmp / "data-b",
            proxy={"failover": {"eject_cooldown_s": 2}},
            top={
                "probe": {
                    "interval_s": 2,
                    "head_interval_s": 1,
                    "timeout_s": 1,
                    "fail_threshold": 2,
                    "recover_threshold": 1,
                }
            },
        )
        st.start_sidecar("sidecar-b", self.config_b, self.sidecar_b)
        proc, url = st.start_chainproxy(
            "chainproxy-sim", self.config_b, self.sidecar_b, cpus=self.proxy_cpus
        )
        self.cp_sim = Target(CP, url, [proc.pid])
        self.rr: Target | None = None
        if self.nginx:
            servers = " ".join(
                f"server 127.0.0.1:{n.url.rsplit(':', 1)[1]} max_fails=1 fail_timeout=2s;"
                for n in self.nodes
            )
            proc, port = st.start_nginx(
                "nginx-rr",
                http=(
                    f"upstream sim {{ {servers} keepalive 32; }} "
                    "server { listen 127.0.0.1:{port}; location / { proxy_pass http://sim; "
                    'proxy_http_version 1.1; proxy_set_header Connection ""; '
                    "proxy_connect_timeout 1s; proxy_read_timeout 10s; } }"
                ),
                cpus=self.proxy_cpus,
            )
            self.rr = Target(RR, f"http://127.0.0.1:{port}", [proc.pid])
        self.wait_routes(self.sidecar_b, 3)

    def node_calls(self) -> list[int]:
        """Per node: the benchmark's calls it has served (the probes' are not counted)."""
        out = []
        for n in self.nodes:
            try:
                out.append(n.state()["calls"].get(FAULT_METHOD, 0))
            except (OSError, ValueError):
                out.append(0)
        return out

    def slow_upstream(self) -> None:
        p, r = self.p, self.report
        print(f"\n[4] one of three upstreams slowed to 300 ms: p99 at {SLOW_RATE}/s", flush=True)
        # A steady rate well below capacity (bench/pyload.py, 8 connections): the
        # tail then shows where calls went, not the queue of a saturated proxy, and
        # the percentiles are those of the calls sent (wrk's coordinated-omission
        # correction would count each 300 ms call ~17 times). Each connection keeps
        # its own slots (bench/pyload.py), so both runs offer the same arrivals.
        systems = [t for t in (self.cp_sim, self.rr) if t is not None]
        for t in systems:
            run_load(t.url + RPC_PATH, FAULT_BODY, connections=8, duration_s=max(1.0, p.warm_s))
        res = {t.name: {"healthy": [], "slow": []} for t in systems}
        share: dict[str, list[float]] = {t.name: [] for t in systems}
        for rep in range(p.fault_reps):
            # a different node each time: one a balancer has learnt to avoid says little
            slow = self.nodes[rep % len(self.nodes)]
            order = systems if rep % 2 == 0 else systems[::-1]
            for t in order:
                # healthy and slow back to back, the order swapped every repetition,
                # so a drift of the machine's speed weighs on both alike
                for phase in ("healthy", "slow") if rep % 2 == 0 else ("slow", "healthy"):
                    if phase == "healthy":
                        res[t.name]["healthy"].append(
                            measure(t, FAULT_BODY, 8, p.slow_s, "pyload", SLOW_RATE)
                        )
                        continue
                    slow.control(latency_ms=300)
                    before = self.node_calls()
                    run = measure(t, FAULT_BODY, 8, p.slow_s, "pyload", SLOW_RATE)
                    i = rep % len(self.nodes)
                    served = self.node_calls()[i] - before[i]
                    slow.control(latency_ms=0)
                    res[t.name]["slow"].append(run)
                share[t.name].append(100 * served / max(1, run.load.requests))

        def pooled_p99(runs: list[Run]) -> float | None:
            """p99 over every call of every repetition (the tail of one short run is
            mostly other processes' noise on this machine)."""
            xs = sorted(x for r in runs for x in r.load.samples)
            return xs[min(len(xs) - 1, int(0.99 * len(xs)))] if xs else p99(runs)

        cp = res[CP]
        hp, sp = pooled_p99(cp["healthy"]), pooled_p99(cp["slow"])
        r4 = ratio(sp, hp)
        r.row(
            f"4. one upstream at 300 ms: p99 at {SLOW_RATE}/s, slow ÷ healthy",
            f"healthy p99 {f2(hp, ' ms')}",
            f"chainproxy p99 {f2(sp, ' ms')} "
            f"(slow node got {statistics.median(share[CP]):.2f}% of calls)",
            f2(r4),
        )
        line = (
            "Goal 4 (one upstream slowed to 300 ms, p99 ÷ all-healthy p99 ≤ 1.2): "
            f"chainproxy {f2(r4)}"
        )
        if self.rr is not None:
            rr = res[RR]
            rhp, rsp = pooled_p99(rr["healthy"]), pooled_p99(rr["slow"])
            rr4 = ratio(rsp, rhp)
            r.row(
                "round-robin baseline (nginx): p99, slow ÷ healthy",
                f"healthy p99 {f2(rhp, ' ms')}",
                f"nginx RR p99 {f2(rsp, ' ms')} "
                f"(slow node got {statistics.median(share[RR]):.1f}%)",
                f2(rr4),
            )
            line += f"; round robin (nginx) {f2(rr4)}"
        per_rep = ", ".join(
            f"{f2(h.load.p99_ms)}→{f2(sl.load.p99_ms)}"
            for h, sl in zip(cp["healthy"], cp["slow"], strict=True)
        )
        pairs = [
            sl.load.p99_ms / h.load.p99_ms
            for h, sl in zip(cp["healthy"], cp["slow"], strict=True)
            if h.load.p99_ms
        ]
        r.goal(
            line + f"  [chainproxy p99 {f2(hp)} → {f2(sp)} ms over all calls of"
            f" {p.fault_reps} repetition(s) (per repetition {per_rep}; median of the"
            f" per-repetition ratios {f2(statistics.median(pairs) if pairs else None)});"
            " the slow node got"
            f" {', '.join(f'{x:.2f}' for x in share[CP])}% of calls;"
            f" errors {sum(errors(v) for v in cp.values())}]"
        )
        r.data["slow"] = {
            k: {s: _summary({"x": v})["x"] for s, v in d.items()} for k, d in res.items()
        }
        r.data["slow_pooled_p99_ms"] = {"chainproxy": [hp, sp]}
        r.data["slow_share_pct"] = share

    def killed_upstream(self) -> None:
        p, r = self.p, self.report
        print("\n[5] one of three upstreams killed mid-run: client-visible errors, c=8", flush=True)
        systems = [t for t in (self.cp_sim, self.rr) if t is not None]
        errs: dict[str, list[int]] = {t.name: [] for t in systems}
        served: dict[str, list[int]] = {t.name: [] for t in systems}
        reqs: dict[str, list[int]] = {t.name: [] for t in systems}
        for rep in range(p.kill_reps):
            order = systems if rep % 2 == 0 else systems[::-1]
            for k, t in enumerate(order):
                last = rep == p.kill_reps - 1 and k == len(order) - 1
                box: dict[str, Any] = {}

                def drive(t: Target = t, box: dict[str, Any] = box) -> None:
                    box["run"] = measure(t, FAULT_BODY, 8, p.kill_s)

                before = self.node_calls()
                th = threading.Thread(target=drive)
                th.start()
                time.sleep(p.kill_s / 3)
                # the node this balancer uses most right now: killing an idle one proves little
                now = self.node_calls()
                delta = [a - b for a, b in zip(now, before, strict=True)]
                i = max(range(len(delta)), key=lambda k: delta[k])
                served[t.name].append(delta[i])
                self.nodes[i].proc.stop(signal.SIGKILL)
                th.join(p.kill_s + 60)
                run: Run = box["run"]
                errs[t.name].append(run.load.errors)
                reqs[t.name].append(run.load.requests)
                if last:
                    break  # nothing runs on this stack afterwards
                self.nodes[i] = self.stack.restart_node(self.nodes[i])
                self.wait_routes(self.sidecar_b, 3)
                time.sleep(2.5)  # past nginx's fail_timeout and the addon's ejection
        n_cp = sum(errs[CP])
        r.row(
            "5. one upstream killed mid-run: client errors",
            "goal 0",
            f"chainproxy {n_cp} errors in {sum(reqs[CP])} calls "
            f"(the killed node had served {served[CP]} calls in the run)",
            str(n_cp),
        )
        line = (
            f"Goal 5 (one of three upstreams killed mid-run, client-visible errors = 0): "
            f"chainproxy {n_cp} in {sum(reqs[CP])} calls over {p.kill_reps} kill(s)"
        )
        if self.rr is not None:
            n_rr = sum(errs[RR])
            r.row(
                "round-robin baseline (nginx): client errors",
                "goal 0",
                f"nginx RR {n_rr} errors in {sum(reqs[RR])} calls",
                str(n_rr),
            )
            line += f"; nginx round robin {n_rr} (it does not retry a POST already sent)"
        r.goal(line)
        r.data["killed"] = {"errors": errs, "requests": reqs, "victim_served_before": served}

    # --- scenarios 6, 8 and the addon's own CPU (separate processes) -----------------------

    def stats(self) -> None:
        r = self.report
        print("\n[6] usage statistics (bench/bench_stats.py)", flush=True)
        argv = [sys.executable, str(REPO / "bench" / "bench_stats.py")]
        if self.p.stats_quick:
            argv.append("--quick")
        out = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO).stdout
        ingest = re.search(r"ingest \(bulk.*?: ([\d,]+) records.*?= ([\d,]+) records/s", out)
        worst = re.search(r"ingest \(worst.*?= ([\d,]+) records/s", out)
        summ = re.search(r"summary network=all: median ([\d.]+) ms", out)
        calls = ingest.group(1) if ingest else "?"
        r.row(
            "6. statistics: ingest",
            f"{calls} calls of rollups",
            f"{ingest.group(2) if ingest else '?'} records/s "
            f"(worst case {worst.group(1) if worst else '?'}/s)",
            "-",
        )
        r.row(
            "6. statistics: 7-day summary",
            f"{calls} calls of rollups",
            f"{summ.group(1) if summ else '?'} ms",
            "-",
        )
        r.goal(
            f"Statistics: ingest {ingest.group(2) if ingest else '?'} records/s (worst case "
            f"{worst.group(1) if worst else '?'}/s), 7-day summary "
            f"{summ.group(1) if summ else '?'} ms with {calls} calls' worth of rollups"
        )
        r.data["stats_output"] = out

    def memory(self) -> None:
        r = self.report
        n = self.p.mem_clients
        print(f"\n[8] rate limiter memory after {n:,} distinct clients", flush=True)
        out = subprocess.run(
            [
                sys.executable,
                str(REPO / "bench" / "bench_ratelimit_mem.py"),
                "--clients",
                str(n),
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=REPO,
        ).stdout
        line = next((x for x in out.splitlines() if x.startswith("BENCHJSON ")), None)
        if line is None:
            r.row("8. memory", "?", "bench_ratelimit_mem.py failed", "-")
            return
        d = json.loads(line[len("BENCHJSON ") :])
        r.row(
            f"8. limiter after {n:,} clients",
            f"RSS before {d['rss_before_mb']} MB",
            f"RSS {d['rss_after_mb']} MB, {d['tracked']:,} tracked (max_clients "
            f"{d['max_clients']:,}), {d['bytes_per_client']} B/client",
            "-",
        )
        r.goal(
            f"Memory (limiter in its own process, {n:,} distinct addresses, max_clients "
            f"{d['max_clients']:,}): RSS {d['rss_before_mb']} → {d['rss_after_mb']} MB, "
            f"{d['tracked']:,} clients tracked (bounded), {d['bytes_per_client']} bytes each"
        )
        r.data["memory"] = d

    def addon_cpu(self) -> None:
        r = self.report
        print("\n[+] the addon's own CPU per request (bench/bench_addon.py)", flush=True)
        argv = [sys.executable, str(REPO / "bench" / "bench_addon.py"), "--json"]
        if self.p.stats_quick:
            argv.append("--quick")
        out = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO).stdout
        line = next((x for x in out.splitlines() if x.startswith("BENCHJSON ")), None)
        if line is None:
            return
        d = json.loads(line[len("BENCHJSON ") :])
        r.row(
            "addon stages alone (no mitmproxy, no network)",
            "-",
            f"miss {d['miss']:.0f} µs, hit {d['hit']:.0f} µs CPU/req",
            "-",
        )
        r.data["addon_us"] = d


def _summary(runs: dict[str, list[Run]]) -> dict[str, Any]:
    return {
        name: {
            "rps": rps(rr),
            "p50_ms": p50(rr),
            "p99_ms": p99(rr),
            "cpu_us_per_req": cpu_req(rr),
            "errors": errors(rr),
            "reps": [
                {
                    "rps": round(x.load.rps, 1),
                    "p50_ms": x.load.p50_ms,
                    "p99_ms": x.load.p99_ms,
                    "cpu_us": None if x.cpu_us_per_req is None else round(x.cpu_us_per_req),
                }
                for x in rr
            ],
        }
        for name, rr in runs.items()
    }


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


SCENARIOS = ("1", "2", "3", "7", "4", "5", "6", "8", "addon")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer and shorter runs (< 2 min)")
    ap.add_argument("--only", default="", help="comma-separated scenarios: 1,2,3,4,5,6,7,8,addon")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument(
        "--before",
        type=Path,
        help="another checkout of the project (e.g. `git archive <commit> | tar -x -C DIR`):"
        " its addon is measured too, as 'chainproxy before', in scenarios 1-3",
    )
    args = ap.parse_args()
    p = QUICK if args.quick else FULL
    only = set(args.only.split(",")) if args.only else set(SCENARIOS)
    signal.signal(signal.SIGALRM, lambda *_: (_ for _ in ()).throw(TimeoutError("wall limit")))
    signal.alarm(int(p.wall_limit_s))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if len(CPUS) >= 2:
        os.sched_setaffinity(0, {min(CPUS)})  # children inherit; proxies go to the last core

    started = time.monotonic()
    info = machine()
    print("chainproxy benchmarks" + (" (quick)" if args.quick else ""))
    for k, v in info.items():
        print(f"  {k}: {v}")
    if info["load generator"] != "wrk":
        print("  (wrk not found: using bench/pyload.py, which costs more CPU; make bench-deps)")
    if not nginx_path():
        print("  (nginx not found: no nginx reference, round-robin baseline or scale-out)")
    report = Report()
    report.data["machine"] = info
    with tempfile.TemporaryDirectory(prefix="chainproxy-bench-") as tmp:
        bench = Bench(p, Path(tmp), report, args.before.resolve() if args.before else None)
        steps: list[tuple[str, Callable[[], None]]] = []
        if only & {"1", "2", "3", "7"}:
            steps.append(
                ("setup: trivial upstream, sidecar, proxies", bench.start_throughput_stack),
            )
            steps += [
                (k, f)
                for k, f in (
                    ("1", bench.miss_path),
                    ("2", bench.hit_path),
                    ("3", bench.latency),
                    ("7", bench.scale_out),
                )
                if k in only
            ]
        if only & {"4", "5"}:
            steps.append(
                ("setup: simulated nodes, sidecar, proxies", bench.start_fault_stack),
            )
            steps += [(k, f) for k, f in (("4", bench.slow_upstream), ("5", bench.killed_upstream))]
            steps = [(k, f) for k, f in steps if not k.isdigit() or k in only]
        steps.append(("stop the stacks", bench.stack.stop))
        steps += [
            (k, f)
            for k, f in (("6", bench.stats), ("8", bench.memory), ("addon", bench.addon_cpu))
            if k in only
        ]
        try:
            for name, fn in steps:
                t0 = time.monotonic()
                fn()
                report.data.setdefault("step_s", {})[name] = round(time.monotonic() - t0, 1)
                print(f"  ({name}: {time.monotonic() - t0:.0f} s)", flush=True)
        finally:
            bench.stack.stop()
            signal.alarm(0)
    report.data["elapsed_s"] = round(time.monotonic() - started, 1)
    report.data["loadavg_end"] = os.getloadavg()
    report.print()
    print(
        f"\n{report.data['elapsed_s']:.0f} s; load average at the end "
        f"{', '.join(f'{x:.2f}' for x in report.data['loadavg_end'])} "
        "(other work on the machine makes every number noisier)"
    )
    if args.json:
        args.json.write_text(json.dumps(report.data, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
