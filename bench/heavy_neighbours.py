"""Scenario 13 (heavy neighbours): does pricing the quota in units keep light
clients' latency when heavy clients share the nodes?

Three simulated nodes whose answers take ``PER_MIB_MS`` per MiB, waited in
``BYTE_SLOTS`` places per node (``simnode/faults.py`` ``latency_per_mib_ms``,
``byte_slots``): heavy answers queue, and light calls behind them wait. One
sidecar and two chainproxy processes on core 1, the quota short
(``QUOTA``: 100 units per 10 s per client) so clients meet it within a run:

* ``units``: ``proxy.rate_limit.costs`` at its defaults (a ~1 MiB answer costs
  17 units, ``state_getKeysPaged(prefix, 1000)`` 10);
* ``counting``: ``costs: {enabled: false}`` (every call 1 unit: the proxy before).

``LIGHT`` light clients (one ``chain_getHeader`` and three ``state_getStorage``
of keys of their own each ``LIGHT_PERIOD_S``, like a validator) run alone
(``light only``, on the units proxy: a light call costs 1 either way), then
beside ``HEAVY`` heavy clients (``HEAVY_WORKERS`` calls in flight each:
``get_all_metagraphs`` with params of their own, so never a cache hit, and
``state_getKeysPaged(prefix, 1000)``), as fast as answered, sleeping
``Retry-After`` on a 429. Each client has its own 127.0.x.y address, so its own
quota. The light clients run in one process and the heavy ones in another
(``bench/neighbour_clients.py``), on the runner's core with the nodes: the
proxies' core is theirs alone. Upstream bytes are the nodes' own
``bytes_out`` counters. The runs
alternate, order rotated each repetition; p50/p99 are over the light calls of
every repetition together. Plus the unit costs' own CPU on the hit path
(``bench/bench_addon.py --costs``).

Each share of the light tail is measured apart: every proxy of the scenario
keeps an access log, and the light calls' lines split each call's time into
the node's (``upstream_ms``) and the proxy's own (``bench/access_shares.py``);
what the clients saw beyond the proxy's ``latency_ms`` is the client process,
the kernel and mitmproxy before chainproxy's hook.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from bench.access_shares import Shares, read_shares
from bench.context import Context
from bench.neighbour_clients import HEAVY, LIGHT, Tally, client_ips, heavy_call, merge
from bench.report import f0, f2
from bench.results import json_results
from bench.scripts import run_script, size_args
from bench.stack import Node, post_raw
from chainproxy.supervisor import wait_http

PER_MIB_MS, BYTE_SLOTS = 200.0, 2
QUOTA = {"requests": 100, "window_s": 10}
# the units proxy with a heavy lane: at most one read priced by its bytes in
# flight per node (proxy.upstream_limits.heavy_per_node), the nodes' other
# byte slot kept for light calls
LANE = "units + heavy lane"
RUNS = ("light only", "units", "counting", LANE)
# a diagnostic: the units run with the nodes' byte time off, so what is left of
# the light tail is the proxy's own work on the heavy answers
FAST = "units, nodes not slowed per MiB"
# with --before: the units run and the diagnostic on the other checkout's proxy
BEFORE, FAST_BEFORE = "units, before", "units, nodes not slowed per MiB, before"
GOAL_P99 = 1.5  # light p99 with units at most this times the light-only p99 (issue 23)
LANE_GOAL_P99 = 2.0  # the same with the heavy lane (issue 37)


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def summarise(
    tallies: list[Tally], upstream_bytes: int, seconds: float, shares: Shares | None = None
) -> dict[str, Any]:
    """One run's figures over its repetitions (``shares``: the light calls' lines
    of the proxy's access log, when it kept one)."""
    light = [x for t in tallies for x in t.light]
    split = {}
    if shares is not None and shares.proxy_ms:
        split = {
            "proxy_p99_ms": pct(shares.proxy_ms, 0.99),
            "node_p99_ms": pct(shares.upstream_ms, 0.99),
            "own_p99_ms": pct(shares.own_ms, 0.99),
        }
    return {
        **split,
        "light_calls": len(light),
        "light_p50_ms": pct(light, 0.5) * 1000,
        "light_p99_ms": pct(light, 0.99) * 1000,
        "light_errors": sum(t.light_errors for t in tallies),
        "heavy_ok": sum(t.heavy_ok for t in tallies),
        "heavy_429": sum(t.heavy_429 for t in tallies),
        "heavy_errors": sum(t.heavy_errors for t in tallies),
        "heavy_503": sum(t.heavy_503 for t in tallies),
        "heavy_hedged": sum(t.heavy_hedged for t in tallies),
        "upstream_mib_per_min": upstream_bytes / (1 << 20) / seconds * 60 if seconds else 0.0,
    }


def verdict(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The ratios against the light-only run, and whether the goal is met."""
    base = runs["light only"]["light_p99_ms"]
    units = runs["units"]["light_p99_ms"] / base
    counting = runs["counting"]["light_p99_ms"] / base
    lane = runs[LANE]["light_p99_ms"] / base
    return {
        "units_p99_ratio": units,
        "counting_p99_ratio": counting,
        "lane_p99_ratio": lane,
        "goal_met": units <= GOAL_P99 and runs["units"]["light_errors"] == 0,
        "lane_goal_met": lane <= LANE_GOAL_P99 and runs[LANE]["light_errors"] == 0,
    }


def _clients(url: str, run: int, tag: int, seconds: float, heavy: bool) -> Tally:
    """The light clients in one process and the heavy ones in another (on the
    runner's core, never the proxies'), side by side: their tallies merged."""
    roles = ("light", "heavy") if heavy else ("light",)
    script = str(Path(__file__).resolve().parent / "neighbour_clients.py")
    procs = [
        subprocess.Popen(
            [sys.executable, script, role, url, str(run), str(tag), str(seconds)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for role in roles
    ]
    tallies = []
    for p in procs:
        out, _ = p.communicate(timeout=seconds + 60)
        got = json_results(out)
        if p.returncode != 0 or got is None:
            raise RuntimeError(f"neighbour_clients.py exited {p.returncode}")
        tallies.append(Tally(**got))
    return merge(tallies)


def warm(url: str) -> None:
    """Each heavy kind answered twice by a proxy before it is measured: a proxy
    learns a kind's answer size from its answers (``addon/quota/sizes.py``), and
    until then its calls are light (no lane, no reservation). Measured cold, a
    run's first second is the first heavy calls piling onto the nodes, not the
    steady state the scenario is about. (A deployment's restart keeps the table:
    ``data_dir/answer_sizes.json``; these proxies start with empty data_dirs.)"""
    for i in range(4):  # heavy_call alternates the two heavy kinds
        doc = {"jsonrpc": "2.0", "id": i, **heavy_call(0, i, 0xFF)}
        status, _, body = post_raw(url + "/rpc/v1/finney", json.dumps(doc).encode(), timeout=30)
        if status != 200 or b'"result"' not in body[:200]:
            raise RuntimeError(f"warming {url}: {status} {body[:200]!r}")


class HeavyNeighbours:
    def __init__(self, ctx: Context, before: Path | None = None) -> None:
        self.ctx = ctx
        self.before = before  # another checkout: its units proxy measured beside
        self.nodes: list[Node] = []
        self.targets: dict[str, str] = {}
        self.logs: dict[str, Path] = {}  # a target's access log, by run name

    def start(self) -> None:
        st, ctx = self.ctx.stack, self.ctx
        epoch = time.time() - 3600
        self.nodes = [st.start_node(f"hn-{c}", epoch=epoch, wait=False) for c in "abc"]
        for n in self.nodes:
            wait_http(f"{n.url}/_sim/state", n.proc)
        self._slow(PER_MIB_MS)
        units_cfg, sidecar = st.write_config(
            "hn-units",
            [n.url for n in self.nodes],
            data_dir=ctx.tmp / "hn-units",
            proxy={"rate_limit": dict(QUOTA), **self._log("hn-units")},
        )
        counting_cfg = self._variant(
            units_cfg, "hn-counting", rate_limit={**QUOTA, "costs": {"enabled": False}}
        )
        lane_cfg = self._variant(units_cfg, "hn-lane", upstream_limits={"heavy_per_node": 1})
        variants = (("units", units_cfg), ("counting", counting_cfg), (LANE, lane_cfg))
        started = st.start_sidecar_and_proxies(
            ("sidecar-hn", units_cfg, sidecar),
            [(f"hn-{k.split()[0]}{'-lane' if k == LANE else ''}", cfg) for k, cfg in variants],
            cpus=ctx.proxy_cpus,
        )
        for (name, cfg), (_, url) in zip(variants, started, strict=True):
            self.targets[name] = url
            self.logs[name] = Path(yaml.safe_load(cfg.read_text())["proxy"]["access_log"])
        if self.before is not None:
            cfg = self._variant(units_cfg, "hn-before")
            _, url = st.start_chainproxy(
                "hn-before", cfg, sidecar, cpus=ctx.proxy_cpus, tree=self.before
            )
            self.targets[BEFORE] = self.targets[FAST_BEFORE] = url
        ctx.wait_routes(sidecar, 3)
        for url in set(self.targets.values()):
            warm(url)

    def _log(self, name: str) -> dict[str, str]:
        """The access log options of one proxy (addresses in full: the light
        clients' lines are picked by address)."""
        return {
            "access_log": str(self.ctx.tmp / f"{name}-access.jsonl"),
            "access_log_client": "full",
        }

    def _variant(self, base: Path, name: str, **proxy: Any) -> Path:
        doc = yaml.safe_load(base.read_text())
        doc["proxy"].update({**proxy, **self._log(name)})
        doc["data_dir"] = str(self.ctx.tmp / name)
        path = base.with_name(f"{name}.yaml")
        path.write_text(yaml.safe_dump(doc))
        return path

    def _slow(self, per_mib_ms: float) -> None:
        for n in self.nodes:
            n.control(latency_per_mib_ms=per_mib_ms, byte_slots=BYTE_SLOTS)

    def _bytes(self) -> int:
        return sum(n.state()["bytes_out"] for n in self.nodes)

    def run(self) -> None:
        p = self.ctx.p
        reps, seconds = (1, 1.0) if p.smoke else (1, 12.0) if p.stats_quick else (2, 25.0)
        print(f"\n[13] heavy neighbours: {reps} x {seconds:.0f} s per run", flush=True)
        turns = (*RUNS, BEFORE) if self.before else RUNS
        fast = (FAST, FAST_BEFORE) if self.before else (FAST,)
        names = (*turns, *fast)
        tallies: dict[str, list[Tally]] = {k: [] for k in names}
        shares = {k: Shares() for k in names}
        upstream = dict.fromkeys(names, 0)
        tag = 0
        for r in range(reps):
            k = r % len(turns)
            for name in [*turns[k:], *turns[:k], *(fast if r == 0 else ())]:
                tag += 1
                target = self.targets.get(name, self.targets["units"])
                if name in fast:
                    self._slow(0.0)
                before = self._bytes()
                t = _clients(target + "/rpc/v1/finney", tag, tag, seconds, name != "light only")
                upstream[name] += self._bytes() - before
                tallies[name].append(t)
                self._slow(PER_MIB_MS)
                self.ctx.pause(2, 0.2)  # the nodes' queues drain (and the logs' writers)
                self._split(name, tag, shares[name])
        runs = {
            k: summarise(tallies[k], upstream[k], seconds * len(tallies[k]), shares[k])
            for k in names
        }
        for k in names:
            print(f"  13. {k}: {runs[k]}", flush=True)
        cpu = json_results(run_script("bench_addon.py", "--costs", "--json", *size_args(self.ctx)))
        self._report(runs, verdict(runs), cpu)
        self.ctx.report.data["heavy_neighbours"] = {"runs": runs, "cpu": cpu}

    def _split(self, name: str, tag: int, into: Shares) -> None:
        """The light clients' lines of run ``tag`` in its proxy's access log."""
        # "light only" and the diagnostic run on the units proxy
        log = self.logs.get("units" if name in ("light only", FAST) else name)
        if log is None:  # the other checkout's proxy: its log has no upstream_ms
            return
        got = read_shares(log, set(client_ips(tag)[0]))
        into.proxy_ms += got.proxy_ms
        into.upstream_ms += got.upstream_ms
        into.own_ms += got.own_ms

    def _report(self, runs: dict[str, Any], v: dict[str, Any], cpu: dict[str, Any] | None) -> None:
        r = self.ctx.report

        def light(x: dict[str, Any]) -> str:
            split = (
                f" (in the proxy p99 {f0(x['proxy_p99_ms'])} ms: node {f0(x['node_p99_ms'])},"
                f" own {f0(x['own_p99_ms'])})"
                if "proxy_p99_ms" in x
                else ""
            )
            return (
                f"light p50 {f0(x['light_p50_ms'])} ms, p99 {f0(x['light_p99_ms'])} ms{split},"
                f" {x['light_errors']} errors of {x['light_calls']:,}"
            )

        def heavy(x: dict[str, Any]) -> str:
            return (
                f"heavy {x['heavy_ok']:,} answered, {x['heavy_429']:,} x 429,"
                f" {x['heavy_503']:,} x 503, {x['heavy_errors']} errors,"
                f" {x['heavy_hedged']} hedged;"
                f" upstream {f0(x['upstream_mib_per_min'])} MiB/min"
            )

        base = runs["light only"]
        base_p99 = base["light_p99_ms"]
        for k, ratio in (
            ("units", "units_p99_ratio"),
            ("counting", "counting_p99_ratio"),
            (LANE, "lane_p99_ratio"),
        ):
            r.row(
                f"13. {HEAVY} heavy beside {LIGHT} light clients, {k}: light p99",
                "light only " + light(base) + f", upstream {f0(base['upstream_mib_per_min'])}"
                " MiB/min",
                f"{k}: " + light(runs[k]) + "; " + heavy(runs[k]),
                f2(v[ratio]),
            )
        for k in (BEFORE, FAST_BEFORE) if BEFORE in runs else ():
            r.row(
                f"13. before (--before checkout): {k}, light p99",
                f"light only p99 {f0(base['light_p99_ms'])} ms",
                light(runs[k]) + "; " + heavy(runs[k]),
                f2(runs[k]["light_p99_ms"] / base["light_p99_ms"]),
            )
        fast = runs[FAST]
        r.row(
            f"13. diagnostic: {FAST}, light p99",
            f"light only p99 {f0(base['light_p99_ms'])} ms",
            light(fast) + "; " + heavy(fast),
            f2(fast["light_p99_ms"] / base["light_p99_ms"]),
        )
        added = None
        if cpu is not None:
            added = (cpu["steps_on"] - cpu["steps_off"]) / cpu["hit_off"]
            r.row(
                "13. unit costs' CPU, hit path (rate_limit + charge_bytes alone; whole hit path)",
                f"costs off {cpu['steps_off']:.1f} µs; {cpu['hit_off']:.0f} µs",
                f"costs on {cpu['steps_on']:.1f} µs; {cpu['hit_on']:.0f} µs",
                f"{added:+.1%} of a call; {cpu['hit_on'] / cpu['hit_off']:.2f}",
            )
        r.goal(
            f"Heavy neighbours: light p99 with units {f2(v['units_p99_ratio'])}x the light-only"
            f" run (goal <= {GOAL_P99}x) with {runs['units']['light_errors']} light errors"
            f" (goal 0): {'met' if v['goal_met'] else 'NOT met'}; with plain call counting"
            f" {f2(v['counting_p99_ratio'])}x; with units and a heavy lane of 1 per node"
            f" {f2(v['lane_p99_ratio'])}x (goal <= {LANE_GOAL_P99}x:"
            f" {'met' if v['lane_goal_met'] else 'NOT met'})."
            " Unit costs add "
            + ("n/a" if added is None else f"{added:+.1%}")
            + " to a hit's addon CPU (goal <= 5 %): "
            + ("n/a" if added is None else "met" if added <= 0.05 else "NOT met")
            + (
                ". Before (--before, same run): units"
                f" {f2(runs[BEFORE]['light_p99_ms'] / base_p99)}x,"
                f" nodes not slowed {f2(runs[FAST_BEFORE]['light_p99_ms'] / base_p99)}x"
                f" (after: {f2(v['units_p99_ratio'])}x,"
                f" {f2(runs[FAST]['light_p99_ms'] / base_p99)}x)"
                if BEFORE in runs
                else ""
            )
        )
