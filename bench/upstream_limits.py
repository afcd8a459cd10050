"""Scenario 14 (upstream limits, issue 24): does the proxy stop hammering nodes
that rate-limit it, and fail a call it cannot place cleanly?

Three simulated nodes that each admit ``limit_rps`` HTTP calls in any sliding
second and answer the rest 429 at once, with no ``Retry-After``
(``simnode/faults.py`` ``limit_rps``); the proxy is not told their limits (no
``registry.endpoints[].max_rps``). One sidecar; per variant two chainproxy
processes on core 1, fresh (nothing learned from an earlier run):

* ``before``: ``proxy.upstream_limits: {enabled: false}`` (a 429 is a plain
  failure that fails over to the next node: the proxy before issue 24);
* ``after``: ``proxy.upstream_limits`` at its defaults (adaptive budgets learned
  from the 429s, a short fair wait, then 503 ``upstream_capacity``);
* ``prior`` (with ``bench/run.py --before DIR``): ``after`` with another
  checkout's addon, so a change to the learned rates is measured beside the
  same run's ``after``. It runs last; ``BENCH_14_PRIOR_FIRST=1`` runs it
  right after ``before`` instead: the run in that slot meets 2-3x more 429s
  whatever its code (docs/BENCHMARKS.md), so compare a slot with itself.

One client offers ``OFFERED_RPS`` calls per second, open loop (a call is sent
on schedule whatever the earlier ones are doing), each a ``state_getStorage`` of
a key of its own (never a cache hit, never coalesced). Two variants:
``limit_rps`` 15 (45/s of capacity for 30/s offered: every call fits) and 8
(24/s for 30/s: a fifth of the calls cannot be placed). Upstream 429s are the
sum of the nodes' ``rate_limited`` counters (over the whole run, and from its
middle on: after the first seconds an adaptive proxy should have learnt); the
nodes' logs of arrivals say whose request each 429 refused (the proxy's
``User-Agent: chainproxy``, or the sidecar's probes), and how many came after
the first ``WARMUP_S`` (per 1,000 client calls sent after it);
client errors are any answer but HTTP 200 with a result, told apart as 503
``upstream_capacity`` (JSON-RPC ``error.data.policy``), 502, or other. p50/p99
are over every call that got an HTTP answer.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from bench.context import Context
from bench.report import f0, f1, f2
from bench.stack import Node
from chainproxy.supervisor import wait_http

OFFERED_RPS = 30.0
LIMITS = (15, 8)  # limit_rps per node in the two variants
RUNS = ("before", "after")
PRIOR = "prior"  # with --before: the other checkout's addon, limits on
AT_KEPT = 40  # the first 429s' times kept in a run's figures
WARMUP_S = 4.0  # the 429s after this long are counted apart: an adaptive proxy has learnt
STORAGE = "0x658faa385070e074c85bf6b568cf0555"
GOAL_429_PER_1000 = 10.0  # after, last half of the run, variant 15
CAPACITY = "upstream_capacity"


@dataclass(slots=True)
class Outcome:
    t: float  # seconds from the start of the run to the call's send time
    latency_s: float | None  # None: no HTTP answer at all
    kind: str  # ok, capacity (503 upstream_capacity), 502, other


@dataclass
class NodeCounts:
    rate_limited: int = 0
    requests: int = 0
    max_rps_seen: int = 0


@dataclass
class RunResult:
    calls: list[Outcome] = field(default_factory=list)
    seconds: float = 0.0
    warmup_s: float = WARMUP_S  # shorter in a run shorter than twice it (a smoke run)
    rate_limited_total: int = 0
    rate_limited_last_half: int = 0
    upstream_requests: int = 0
    max_rps_seen: list[int] = field(default_factory=list)  # per node
    # 429s by whose request they refused (``sender``): over the run, after WARMUP_S
    refused: dict[str, int] = field(default_factory=dict)
    refused_after_warmup: dict[str, int] = field(default_factory=dict)
    # each 429: seconds into the run, whose, which node (0, 1, 2): when they came
    refused_at: list[tuple[float, str, int]] = field(default_factory=list)


def sender(agent: str) -> str:
    """Whose request a node's arrival was, from its User-Agent: ``proxy``
    (the addon's ``chainproxy``), ``probes`` (the sidecar's), or ``other``."""
    if agent == "chainproxy":
        return "proxy"
    return "probes" if agent.startswith("chainproxy-sidecar") else "other"


def refusals(arrivals: list[dict[str, Any]], since: float | None = None) -> dict[str, int]:
    """The refused arrivals (429s) by ``sender``, those after ``since`` when given."""
    out = {"proxy": 0, "probes": 0, "other": 0}
    for a in arrivals:
        if a.get("refused") and (since is None or a["t"] >= since):
            out[sender(a["agent"])] += 1
    return out


def classify(status: int, body: bytes) -> str:
    """What one client call met: ``ok`` (200 with a result), ``capacity`` (503
    whose JSON-RPC error says policy ``upstream_capacity``), ``502``, or
    ``other``."""
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if isinstance(doc, list) and len(doc) == 1:
        doc = doc[0]
    if status == 200:
        return "ok" if isinstance(doc, dict) and "result" in doc else "other"
    if status == 503 and isinstance(doc, dict):
        err = doc.get("error")
        data = err.get("data") if isinstance(err, dict) else None
        if isinstance(data, dict) and data.get("policy") == CAPACITY:
            return "capacity"
    return "502" if status == 502 else "other"


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def per_1000(n: int, calls: int) -> float:
    return n * 1000 / calls if calls else float("nan")


def summarise(r: RunResult) -> dict[str, Any]:
    """One run's figures."""
    calls = len(r.calls)
    late = sum(1 for c in r.calls if c.t >= r.seconds / 2)
    warm = sum(1 for c in r.calls if c.t >= r.warmup_s)
    after_warmup = sum(r.refused_after_warmup.values())
    kinds = {k: sum(1 for c in r.calls if c.kind == k) for k in ("ok", "capacity", "502", "other")}
    answered = [c.latency_s for c in r.calls if c.latency_s is not None]
    return {
        "calls": calls,
        "errors": calls - kinds["ok"],
        "capacity_503": kinds["capacity"],
        "bad_gateway_502": kinds["502"],
        "other_errors": kinds["other"],
        "p50_ms": pct(answered, 0.5) * 1000,
        "p99_ms": pct(answered, 0.99) * 1000,
        "upstream_429": r.rate_limited_total,
        "upstream_429_per_1000": per_1000(r.rate_limited_total, calls),
        "upstream_429_last_half_per_1000": per_1000(r.rate_limited_last_half, late),
        "warmup_s": r.warmup_s,
        "upstream_429_after_warmup_per_1000": per_1000(after_warmup, warm),
        "upstream_429_by_sender": dict(r.refused),
        "upstream_429_after_warmup_by_sender": dict(r.refused_after_warmup),
        # when they came (the first AT_KEPT): where the 429s of a quiet run went
        "upstream_429_at": [f"{t:.1f}s {who} n{node}" for t, who, node in r.refused_at[:AT_KEPT]],
        "upstream_calls_per_call": r.upstream_requests / calls if calls else float("nan"),
        "max_rps_seen": r.max_rps_seen,
    }


def verdict(results: dict[int, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """The ratios after ÷ before, and whether the goals are met: with room for
    every call, after the first half hardly a 429 and no client error; without
    room, the calls that cannot be placed are 503 ``upstream_capacity``, no 502."""
    ratios = {}
    for limit, runs in results.items():
        b, a = runs["before"]["upstream_429_per_1000"], runs["after"]["upstream_429_per_1000"]
        ratios[limit] = a / b if b else float("nan")
    roomy, tight = results[LIMITS[0]]["after"], results[LIMITS[1]]["after"]
    quiet = roomy["upstream_429_last_half_per_1000"] <= GOAL_429_PER_1000
    clean = roomy["errors"] == 0 and tight["bad_gateway_502"] == 0 and tight["other_errors"] == 0
    return {"ratio_429": ratios, "goal_met": quiet and clean}


def storage_key(tag: int, i: int) -> str:
    """The i-th call's key in run ``tag``: never asked before, so never a cache hit."""
    return f"{STORAGE}{tag:04x}{i:08x}"


async def _one(s: aiohttp.ClientSession, url: str, key: str, t: float, out: list[Outcome]) -> None:
    doc = {"jsonrpc": "2.0", "id": 1, "method": "state_getStorage", "params": [key]}
    t0 = time.perf_counter()
    try:
        async with s.post(url, json=doc) as r:
            body = await r.read()
        out.append(Outcome(t, time.perf_counter() - t0, classify(r.status, body)))
    except (aiohttp.ClientError, TimeoutError):
        out.append(Outcome(t, None, "other"))


async def offer(url: str, tag: int, seconds: float, at_half: Any) -> tuple[float, list[Outcome]]:
    """``OFFERED_RPS`` calls per second for ``seconds``, on schedule; ``at_half``
    (blocking) is called in a thread at the middle of the run. The wall-clock
    time of the first call, and every call's outcome."""
    out: list[Outcome] = []
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout) as s:
        start, wall = time.monotonic(), time.time()
        half = asyncio.ensure_future(_at(start + seconds / 2, at_half))
        tasks = []
        for i in range(int(OFFERED_RPS * seconds)):
            t = i / OFFERED_RPS
            await asyncio.sleep(max(0.0, start + t - time.monotonic()))
            tasks.append(asyncio.ensure_future(_one(s, url, storage_key(tag, i), t, out)))
        await asyncio.wait(tasks, timeout=35)
        await half
    return wall, out


async def _at(when: float, fn: Any) -> None:
    await asyncio.sleep(max(0.0, when - time.monotonic()))
    await asyncio.to_thread(fn)


def wall_s(quick: bool, before: bool = False) -> float:
    """What this scenario adds to the runner's time limit (``before``: with the
    ``prior`` runs)."""
    return (200.0 if quick else 400.0) * (1.5 if before else 1.0)


class UpstreamLimits:
    def __init__(self, ctx: Context, before: Path | None = None) -> None:
        self.ctx = ctx
        self.before = before  # another checkout: its addon is the ``prior`` run
        self.runs = RUNS + ((PRIOR,) if before is not None else ())
        if before is not None and os.environ.get("BENCH_14_PRIOR_FIRST"):
            self.runs = ("before", PRIOR, "after")  # the slot after ``before`` is worse
        self.nodes: list[Node] = []
        self.targets: dict[tuple[int, str], str] = {}  # (limit, run) -> proxy URL
        self.sidecar = ""

    def start(self) -> None:
        st, ctx = self.ctx.stack, self.ctx
        epoch = time.time() - 3600
        self.nodes = [st.start_node(f"ul-{c}", epoch=epoch, wait=False) for c in "abc"]
        for n in self.nodes:
            wait_http(f"{n.url}/_sim/state", n.proc)
        base, self.sidecar = st.write_config(
            "ul-sidecar", [n.url for n in self.nodes], data_dir=ctx.tmp / "ul-sidecar"
        )
        keys = [(limit, run) for limit in LIMITS for run in self.runs]
        started = st.start_sidecar_and_proxies(
            ("sidecar-ul", base, self.sidecar),
            [
                (
                    f"ul-{run}-{limit}",
                    self._variant(base, f"ul-{run}-{limit}", enabled=run != "before"),
                )
                for limit, run in keys
            ],
            cpus=ctx.proxy_cpus,
            trees={f"ul-{PRIOR}-{limit}": self.before for limit in LIMITS if self.before},
        )
        for key, (_, url) in zip(keys, started, strict=True):
            self.targets[key] = url
        ctx.wait_routes(self.sidecar, 3)

    def _variant(self, base: Path, name: str, *, enabled: bool) -> Path:
        doc = yaml.safe_load(base.read_text())
        if not enabled:
            doc["proxy"]["upstream_limits"] = {"enabled": False}
        doc["data_dir"] = str(self.ctx.tmp / name)
        path = base.with_name(f"{name}.yaml")
        path.write_text(yaml.safe_dump(doc))
        return path

    def _counts(self) -> list[NodeCounts]:
        out = []
        for n in self.nodes:
            s = n.state()
            out.append(NodeCounts(s["rate_limited"], s["requests"], s["max_rps_seen"]))
        return out

    def _run(self, limit: int, run: str, tag: int, seconds: float) -> RunResult:
        for n in self.nodes:
            n.reset()
        # the last run's 429s may have failed probes
        self.ctx.wait_routes(self.sidecar, 3, settle_s=0.3 if self.ctx.p.smoke else 1.5)
        for n in self.nodes:
            n.control(limit_rps=limit)
        mid: list[NodeCounts] = []
        url = self.targets[limit, run] + "/rpc/v1/finney"
        start, calls = asyncio.run(offer(url, tag, seconds, lambda: mid.extend(self._counts())))
        end = self._counts()
        logs = [n.arrivals() for n in self.nodes]
        arrivals = [a for log in logs for a in log]
        refused_at = sorted(
            (a["t"] - start, f"{sender(a['agent'])}:{a['calls']}", i)
            for i, log in enumerate(logs)
            for a in log
            if a.get("refused")
        )
        for n in self.nodes:
            n.reset()
        total = sum(c.rate_limited for c in end)
        warmup = min(WARMUP_S, seconds / 2)
        return RunResult(
            calls=calls,
            seconds=seconds,
            warmup_s=warmup,
            rate_limited_total=total,
            rate_limited_last_half=total - sum(c.rate_limited for c in mid),
            upstream_requests=sum(c.requests for c in end),
            max_rps_seen=[c.max_rps_seen for c in end],
            refused=refusals(arrivals),
            refused_after_warmup=refusals(arrivals, start + warmup),
            refused_at=refused_at,
        )

    def run(self) -> None:
        p = self.ctx.p
        seconds = 2.0 if p.smoke else 12.0 if p.stats_quick else 30.0
        print(
            f"\n[14] upstream limits: {OFFERED_RPS:.0f} calls/s offered for {seconds:.0f} s"
            f" to 3 nodes limited to {' or '.join(map(str, LIMITS))} calls/s each",
            flush=True,
        )
        results: dict[int, dict[str, dict[str, Any]]] = {}
        tag = 0
        for limit in LIMITS:
            for run in self.runs:
                tag += 1
                s = summarise(self._run(limit, run, tag, seconds))
                results.setdefault(limit, {})[run] = s
                print(f"  14. limit {limit}/s, {run}: {s}", flush=True)
                self.ctx.pause(1.5)  # the nodes' windows and the proxies' back-offs clear
        v = verdict(results)
        self._report(results, v, seconds)
        self.ctx.report.data["upstream_limits"] = {
            "seconds": seconds,
            "offered_rps": OFFERED_RPS,
            "runs": {str(k): r for k, r in results.items()},
            "verdict": {**v, "ratio_429": {str(k): x for k, x in v["ratio_429"].items()}},
        }

    def _report(self, results: dict[int, Any], v: dict[str, Any], seconds: float) -> None:
        r = self.ctx.report

        def limits(x: dict[str, Any]) -> str:
            by = x["upstream_429_by_sender"]
            return (
                f"{f0(x['upstream_429_per_1000'])} x 429 per 1,000 calls"
                f" ({f0(x['upstream_429_last_half_per_1000'])} in the last half,"
                f" {f1(x['upstream_429_after_warmup_per_1000'])} after {x['warmup_s']:g} s;"
                f" {by['proxy']} to the proxy, {by['probes']} to probes),"
                f" {f2(x['upstream_calls_per_call'])} upstream calls per call,"
                f" nodes' peak {'/'.join(map(str, x['max_rps_seen']))} calls/s"
            )

        def client(x: dict[str, Any]) -> str:
            share = x["errors"] / x["calls"] if x["calls"] else float("nan")
            return (
                f"{x['errors']:,} errors of {x['calls']:,} = {share:.0%}"
                f" ({x['capacity_503']:,} x 503"
                f" {CAPACITY}, {x['bad_gateway_502']:,} x 502, {x['other_errors']:,} other),"
                f" p50 {f0(x['p50_ms'])} ms, p99 {f0(x['p99_ms'])} ms"
            )

        for limit in LIMITS:
            b, a = results[limit]["before"], results[limit]["after"]
            what = f"14. 3 nodes at {limit} calls/s ({3 * limit}/s), {OFFERED_RPS:.0f}/s offered"
            ratio = f2(v["ratio_429"][limit])
            r.row(what + ": upstream 429s", "before " + limits(b), "after " + limits(a), ratio)
            least = max(0.0, 1 - 3 * limit / OFFERED_RPS)  # the calls no node can take
            r.row(
                what + f": clients (errors at least {least:.0%})",
                "before " + client(b),
                "after " + client(a),
                "",
            )
            if PRIOR in results[limit]:  # --before: the other checkout, limits on
                pr = results[limit][PRIOR]
                r.row(
                    what + ": --before checkout", "prior " + limits(pr), "prior " + client(pr), ""
                )
        roomy, tight = results[LIMITS[0]]["after"], results[LIMITS[1]]["after"]
        r.goal(
            f"Upstream limits ({seconds:.0f} s runs): at {LIMITS[0]}/s per node, after, "
            f"{f0(roomy['upstream_429_last_half_per_1000'])} upstream 429s per 1,000 calls in the"
            f" last half (goal <= {GOAL_429_PER_1000:.0f}; before"
            f" {f0(results[LIMITS[0]]['before']['upstream_429_last_half_per_1000'])}) with"
            f" {roomy['errors']} client errors (goal 0); at {LIMITS[1]}/s per node"
            f" ({3 * LIMITS[1]}/s for {OFFERED_RPS:.0f}/s), {tight['capacity_503']} x 503"
            f" {CAPACITY}, {tight['bad_gateway_502']} x 502, {tight['other_errors']} other"
            f" (goal: no 502, no other): {'met' if v['goal_met'] else 'NOT met'}"
        )
