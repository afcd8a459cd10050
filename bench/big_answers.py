"""Scenario 21 (big answers beside small ones): small cached reads' latency
while heavy clients pull ~1 MiB answers through the same proxy.

Three simulated nodes that spend no time per MiB (the proxy's own work on a
big answer is what is measured), one sidecar, chainproxy on core 1 (and, with
``--before``, the other checkout's chainproxy beside it, measured in turn).
The light client (``bench/pyload.py``, its own process) sends
``chain_getHeader(<hash>)``, a cache hit, paced at ``LIGHT_RATE`` a second over
``LIGHT_CONNECTIONS`` connections; the heavy clients (``bench/big_pull.py``,
another process) are ``HEAVY_CLIENTS`` clients each pulling ``HEAVY_RATE``
``get_all_metagraphs`` answers (~1 MiB, params of their own: a miss, read,
judged, cached and answered each time) a second. Both on the runner's core
with the nodes. Each proxy runs light alone, then light beside heavy,
alternating, order rotated each repetition; p99 over the light calls of every
repetition together; the figure is light p99 beside heavy ÷ light alone.

A third run measures the shares apart: the same heavy clients pull straight
from a node, not through the proxy, so the runner's core is as busy as
beside heavy (the nodes making, the heavy clients reading 20 MiB/s) while
the proxy handles the light calls alone. Light p99 there ÷ light alone is the
machine's share; beside heavy ÷ that run is the proxy's own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.context import Context
from bench.load import run_load
from bench.loop_holds import summarise as holds_of
from bench.report import f0, f2
from bench.results import json_results
from bench.stack import Node, post_raw
from chainproxy.supervisor import wait_http

LIGHT_RATE, LIGHT_CONNECTIONS = 200, 8
HEAVY_CLIENTS, HEAVY_RATE = 4, 5
GOAL = 2.0  # light p99 beside heavy at most this times light alone
RUNS = ("light alone", "beside heavy", "heavy to the nodes")
WALL_S = (120.0, 300.0)  # quick, full: seconds the run's wall limit grows by (x1.5 with --before)


def p99(samples: list[float]) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(0.99 * len(s)))] if s else float("nan")


def p50(samples: list[float]) -> float:
    s = sorted(samples)
    return s[len(s) // 2] if s else float("nan")


class BigAnswers:
    def __init__(self, ctx: Context, before: Path | None = None) -> None:
        self.ctx = ctx
        self.before = before
        self.nodes: list[Node] = []
        self.targets: dict[str, str] = {}
        self.light_body = b""
        self.holds: dict[str, Path] = {}  # each proxy's loop holds (bench/loop_holds.py)

    def start(self) -> None:
        st, ctx = self.ctx.stack, self.ctx
        epoch = time.time() - 3600
        self.nodes = [st.start_node(f"ba-{c}", epoch=epoch, wait=False) for c in "abc"]
        for n in self.nodes:
            wait_http(f"{n.url}/_sim/state", n.proc)
        config, sidecar = st.write_config(
            "ba", [n.url for n in self.nodes], data_dir=ctx.tmp / "ba-after"
        )
        st.start_sidecar("sidecar-ba", config, sidecar)
        trees: list[tuple[str, Path | None]] = [("after", None)]
        if self.before is not None:
            trees.append(("before", self.before))
        started = []
        for name, tree in trees:
            cfg = config
            if tree is not None:  # a data directory of its own: its own cache
                cfg = config.with_name("ba-before.yaml")
                cfg.write_text(config.read_text().replace("ba-after", "ba-before"))
            self.holds[name] = ctx.tmp / f"ba-{name}-holds.txt"
            probe = Path(__file__).resolve().parent / "loop_holds.py"
            started.append(
                (
                    name,
                    st.start_chainproxy(
                        f"ba-{name}",
                        cfg,
                        sidecar,
                        cpus=ctx.proxy_cpus,
                        tree=tree,
                        wait=False,
                        scripts=(probe,),
                        env={"CHAINPROXY_HOLDS_FILE": str(self.holds[name])},
                    ),
                )
            )
        for name, (proc, url) in started:
            wait_http(f"{url}/rpc/", proc)
            self.targets[name] = url
        ctx.wait_routes(sidecar, 3)
        head = int(self.nodes[0].rpc("chain_getHeader")["result"]["number"], 16)
        block = self.nodes[0].rpc("chain_getBlockHash", [head - 2])["result"]
        self.light_body = json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "chain_getHeader", "params": [block]}
        ).encode()
        for url in self.targets.values():  # the light read is a hit from now on
            for _ in range(2):
                status, headers, _ = post_raw(url + "/rpc/v1/finney", self.light_body)
            if status != 200 or headers.get("X-Cache") != "HIT":
                raise RuntimeError(f"the light read is not a cache hit at {url}: {status}")

    def _heavy(self, url: str, seconds: float, tag: int) -> subprocess.Popen[str]:
        argv = [
            sys.executable,
            str(Path(__file__).resolve().parent / "big_pull.py"),
            "--url", url, "--clients", str(HEAVY_CLIENTS), "--rate", str(HEAVY_RATE),
            "--seconds", str(seconds), "--tag", str(tag),
        ]  # fmt: skip
        return subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)

    def run(self) -> None:
        p = self.ctx.p
        reps, seconds = (1, 1.0) if p.smoke else (2, 6.0) if p.stats_quick else (3, 10.0)
        print(f"\n[21] big answers beside small ones: {reps} x {seconds:.0f} s per run", flush=True)
        names = list(self.targets)
        samples: dict[tuple[str, str], list[float]] = {(n, r): [] for n in names for r in RUNS}
        heavy: dict[str, dict[str, float]] = {n: {"ok": 0, "errors": 0, "mib": 0.0} for n in names}
        tag = 0
        for rep in range(reps):
            order = names[rep % len(names) :] + names[: rep % len(names)]
            for name in order:
                url = self.targets[name] + "/rpc/v1/finney"
                for run in RUNS:
                    tag += 1
                    pull = None
                    if run != RUNS[0]:  # through the proxy, or straight from a node
                        to = url if run == RUNS[1] else self.nodes[tag % len(self.nodes)].url
                        pull = self._heavy(to, seconds + 1.5, tag)
                    if pull is not None:
                        time.sleep(0.75)  # the heavy clients under way
                    res = run_load(
                        url,
                        self.light_body,
                        connections=LIGHT_CONNECTIONS,
                        duration_s=seconds,
                        tool="pyload",
                        rate=LIGHT_RATE,
                    )
                    samples[(name, run)] += list(res.samples)
                    if res.errors:
                        self.ctx.report.fail(f"{res.errors} light errors ({name}, {run})")
                    if pull is not None:
                        out, _ = pull.communicate(timeout=seconds + 60)
                        got = json_results(out)
                        if pull.returncode != 0 or got is None:
                            raise RuntimeError(f"big_pull.py exited {pull.returncode}")
                        if run == RUNS[1]:  # the figures are those through the proxy
                            for k in heavy[name]:
                                heavy[name][k] += got[k]
                    self.ctx.pause(1, 0.1)
        figures = {
            n: {
                "alone_p50_ms": p50(samples[(n, RUNS[0])]),
                "alone_p99_ms": p99(samples[(n, RUNS[0])]),
                "heavy_p50_ms": p50(samples[(n, RUNS[1])]),
                "heavy_p99_ms": p99(samples[(n, RUNS[1])]),
                "light_calls": len(samples[(n, RUNS[1])]),
                "control_p99_ms": p99(samples[(n, RUNS[2])]),
                **heavy[n],
                "heavy_mib_per_s": heavy[n]["mib"] / (reps * (seconds + 1.5)),
            }
            for n in names
        }
        for n, f in figures.items():
            f["ratio"] = f["heavy_p99_ms"] / f["alone_p99_ms"]
            f["machine_ratio"] = f["control_p99_ms"] / f["alone_p99_ms"]
            f["proxy_ratio"] = f["heavy_p99_ms"] / f["control_p99_ms"]
            f.update(holds_of(self.holds[n]))
            print(f"  21. {n}: {f}", flush=True)
        self._report(figures)
        self.ctx.report.data["big_answers"] = figures

    def _report(self, figures: dict[str, dict[str, Any]]) -> None:
        r = self.ctx.report
        for n, f in figures.items():
            r.row(
                f"21. small cached reads beside {HEAVY_CLIENTS} x {HEAVY_RATE} x 1 MiB/s, {n}: p99",
                f"alone p50 {f2(f['alone_p50_ms'])} / p99 {f2(f['alone_p99_ms'])} ms",
                f"beside heavy p50 {f2(f['heavy_p50_ms'])} / p99 {f2(f['heavy_p99_ms'])} ms;"
                f" heavy {f0(f['ok'])} answered, {f0(f['errors'])} errors,"
                f" {f2(f['heavy_mib_per_s'])} MiB/s; heavy straight to the nodes p99"
                f" {f2(f['control_p99_ms'])} ms (the machine's share {f2(f['machine_ratio'])}x,"
                f" the proxy's {f2(f['proxy_ratio'])}x); loop held > 2 ms"
                f" {f0(f['holds_over_2ms'])} times, > 1 ms {f0(f['holds_over_1ms'])},"
                f" longest {f2(f['longest_hold_ms'])} ms CPU",
                f2(f["ratio"]),
            )
        after = figures["after"]["ratio"]
        line = (
            f"Big answers: small cached reads' p99 beside {HEAVY_CLIENTS} clients pulling"
            f" {HEAVY_RATE} x 1 MiB/s each is {f2(after)}x their p99 alone (goal <= {GOAL}x):"
            f" {'met' if after <= GOAL else 'NOT met'}; of it, the machine's share (heavy"
            f" clients pulling straight from the nodes) {f2(figures['after']['machine_ratio'])}x"
            f" and the proxy's own {f2(figures['after']['proxy_ratio'])}x. The proxy's loop held"
            f" over 2 ms of CPU {f0(figures['after']['holds_over_2ms'])} times for"
            f" {f0(figures['after']['ok'])} big answers (longest"
            f" {f2(figures['after']['longest_hold_ms'])} ms)"
        )
        if "before" in figures:
            b = figures["before"]
            line += (
                f"; before: {f2(b['ratio'])}x, loop held over 2 ms {f0(b['holds_over_2ms'])}"
                f" times (longest {f2(b['longest_hold_ms'])} ms)"
            )
        r.goal(line)
