"""Scenarios 4 and 5: chainproxy and a round-robin balancer (nginx) in front of
three simulated nodes, one of which is slowed down (4) or killed mid-run (5):
what the client sees of an upstream's trouble."""

from __future__ import annotations

import json
import signal
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from bench.context import Context
from bench.load import run_load
from bench.measure import (
    CP,
    RPC_PATH,
    RR,
    Run,
    Target,
    errors,
    measure,
    p99,
    ratio,
    schedstat,
    summary,
)
from bench.report import f2
from bench.stack import Node
from chainproxy.supervisor import wait_http

SLOW_RATE = 200  # req/s in the slow-upstream scenario: ~40% of one chainproxy process
# a read the sidecar's probes never send, so the nodes' per-method counters tell
# which node served the benchmark's calls
FAULT_METHOD = "state_getRuntimeVersion"
FAULT_BODY = json.dumps({"jsonrpc": "2.0", "id": 0, "method": FAULT_METHOD, "params": []}).encode()
# Scenario 4 sends every call a state_getStorage of a key of its own (bench/pyload.py
# --distinct): each call then chooses a node. One repeated call (FAULT_BODY) is shared
# by the calls in flight with it (coalescing: ~40 % of them never chose a node) and,
# since head probes read the runtime version too, the nodes' state_getRuntimeVersion
# counters also count the sidecar's probes (~1/s/node, 0.5 % of a 4 s run).
SLOW_METHOD = "state_getStorage"


class FaultBench:
    def __init__(self, ctx: Context, proxy: dict[str, Any] | None = None) -> None:
        self.ctx = ctx
        self.proxy_extra = proxy or {}  # more of chainproxy's ``proxy:`` section
        self.nodes: list[Node] = []
        self.config_b: Path | None = None
        self.sidecar_b = ""
        self.cp_sim: Target | None = None
        self.rr: Target | None = None

    def start(self) -> None:
        """Three simulated nodes, a sidecar that probes them often, chainproxy and
        (where installed) nginx balancing round robin over the same nodes."""
        st = self.ctx.stack
        epoch = time.time() - 3600
        self.nodes = [st.start_node(f"sim-{c}", epoch=epoch, wait=False) for c in "abc"]
        for n in self.nodes:
            wait_http(f"{n.url}/_sim/state", n.proc)
        self.config_b, self.sidecar_b = st.write_config(
            "sim",
            [n.url for n in self.nodes],
            data_dir=self.ctx.tmp / "data-b",
            proxy={"failover": {"eject_cooldown_s": 2}, **self.proxy_extra},
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
        [(proc, url)] = st.start_sidecar_and_proxies(
            ("sidecar-b", self.config_b, self.sidecar_b),
            [("chainproxy-sim", self.config_b)],
            cpus=self.ctx.proxy_cpus,
        )
        self.cp_sim = Target(CP, url, [proc.pid])
        if self.ctx.nginx:
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
                cpus=self.ctx.proxy_cpus,
            )
            self.rr = Target(RR, f"http://127.0.0.1:{port}", [proc.pid])
        self.ctx.wait_routes(self.sidecar_b, 3)

    def node_calls(self, method: str = FAULT_METHOD) -> list[int]:
        """Per node: the benchmark's calls of ``method`` it has served."""
        out = []
        for n in self.nodes:
            try:
                out.append(n.state()["calls"].get(method, 0))
            except (OSError, ValueError):
                out.append(0)
        return out

    def slow_upstream(self) -> None:
        p, r = self.ctx.p, self.ctx.report
        print(f"\n[4] one of three upstreams slowed to 300 ms: p99 at {SLOW_RATE}/s", flush=True)
        # A steady rate well below capacity (bench/pyload.py, 8 connections): the
        # tail then shows where calls went, not the queue of a saturated proxy, and
        # the percentiles are those of the calls sent (wrk's coordinated-omission
        # correction would count each 300 ms call ~17 times). Each connection keeps
        # its own slots (bench/pyload.py), so both runs offer the same arrivals.
        systems = [t for t in (self.cp_sim, self.rr) if t is not None]
        for t in systems if not p.smoke else ():
            run_load(
                t.url + RPC_PATH,
                FAULT_BODY,
                connections=8,
                duration_s=max(1.0, p.warm_s),
                tool="pyload",
                distinct=True,
            )
        res = {t.name: {"healthy": [], "slow": []} for t in systems}
        share: dict[str, list[float]] = {t.name: [] for t in systems}
        # the share of each chainproxy phase its process spent ready but not running
        waited: dict[str, list[float]] = {"healthy": [], "slow": []}
        assert self.cp_sim is not None

        def run_phase(t: Target, phase: str) -> Run:
            s0 = schedstat(t.pids[0]) if t is self.cp_sim else None
            t0 = time.monotonic()
            run = measure(t, FAULT_BODY, 8, p.slow_s, "pyload", SLOW_RATE, distinct=True)
            if s0 is not None:
                waited[phase].append(
                    100 * (schedstat(t.pids[0])[1] - s0[1]) / (time.monotonic() - t0)
                )
            return run

        for rep in range(p.fault_reps):
            # a different node each time: one a balancer has learnt to avoid says little
            slow = self.nodes[rep % len(self.nodes)]
            order = systems if rep % 2 == 0 else systems[::-1]
            for t in order:
                # healthy and slow back to back, the order swapped every repetition,
                # so a drift of the machine's speed weighs on both alike
                for phase in ("healthy", "slow") if rep % 2 == 0 else ("slow", "healthy"):
                    if phase == "healthy":
                        res[t.name]["healthy"].append(run_phase(t, phase))
                        continue
                    slow.control(latency_ms=300)
                    before = self.node_calls(SLOW_METHOD)
                    run = run_phase(t, phase)
                    i = rep % len(self.nodes)
                    served = self.node_calls(SLOW_METHOD)[i] - before[i]
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
            f" errors {sum(errors(v) for v in cp.values())}; the proxy waited for its core"
            f" {f2(statistics.median(waited['healthy']))}% of the healthy runs' time and"
            f" {f2(statistics.median(waited['slow']))}% of the slow runs' (medians; other"
            " processes on its core: what no routing decides)]"
        )
        r.data["slow"] = {
            k: {s: summary({"x": v})["x"] for s, v in d.items()} for k, d in res.items()
        }
        r.data["slow_pooled_p99_ms"] = {"chainproxy": [hp, sp]}
        r.data["slow_share_pct"] = share
        r.data["slow_runqueue_wait_pct"] = waited

    def killed_upstream(self) -> None:
        p, r = self.ctx.p, self.ctx.report
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
                self.nodes[i] = self.ctx.stack.restart_node(self.nodes[i])
                self.ctx.wait_routes(self.sidecar_b, 3)
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
