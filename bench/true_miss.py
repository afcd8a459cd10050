"""Scenario 16: the miss path with calls that really miss, on the throughput
stack, beside scenario 1's identical call.

Scenario 1 repeats one ``chain_getHeader`` at 32 connections; since identical
reads in flight share one upstream call (``addon/upstream/coalesce.py``) most
of its calls no longer go upstream, so it measures coalescing, not a miss.
Here, at c=32 over HTTP, every call is new: ``state_getStorage`` of a key
nobody asked at the head's hash (as head pinning sends it: looked up in the
cache, sent upstream, its answer stored) and
``chain_getBlockHash`` of a height nobody asked (finalized: stored too), each
against bare mitmdump forwarding the same calls; the identical
``chain_getHeader`` runs in the same alternation, so its ratio is comparable.
All through ``bench/wsload.py --http`` (one client for every body); order
rotated every repetition; medians."""

from __future__ import annotations

import json

from bench.context import Context
from bench.measure import BARE, CP, RPC_PATH, Run, cpu_req, errors, p50, ratio, rps
from bench.report import f0, f2
from bench.stack import post_raw
from bench.throughput import Throughput
from bench.websocket import Shape, Subject, head_hash, measure_one
from bench.wsload import body

C32 = Shape("c=32", 32, 32, True, ())
# name -> (miss ratio, miss kind): the identical call is wsload's "hit" body
BODIES = {
    "identical chain_getHeader (coalesced)": (0.0, "storage"),
    "distinct state_getStorage at the head": (1.0, "storage"),
    "distinct chain_getBlockHash": (1.0, "blockhash"),
}
IDENTICAL = ["chain_getHeader", []]
WALL_S = (30.0, 90.0)  # what the scenario adds to a run: quick, full (the runner's alarm)


def probe(url: str, kind: str, at: str) -> dict[str, str]:
    """One call of a body through chainproxy: what it did with it (the headers)."""
    doc = json.loads(body(1, 1.0, 12_345, ("chain_getHeader", []), kind, at))
    _, headers, _ = post_raw(url + RPC_PATH, json.dumps(doc).encode())
    keys = ("X-Cache", "X-Chainproxy-Pinned", "X-Chainproxy-Upstream", "X-Chainproxy-Coalesced")
    return {k: headers.get(k, "-") for k in keys}


class TrueMiss:
    def __init__(self, tp: Throughput) -> None:
        self.tp = tp
        self.ctx: Context = tp.ctx

    def run(self) -> None:
        p, r = self.ctx.p, self.ctx.report
        print("\n[16] true misses: distinct calls at c=32 (HTTP) vs bare mitmdump", flush=True)
        ts = self.tp.targets
        subjects = [
            Subject(BARE, ts["bare"], False, False),
            Subject(CP, ts["chainproxy"], False, True),
        ]
        at = head_hash(self.tp.trivial)  # storage reads at the head, as pinning sends them
        seen = {k: probe(ts["chainproxy"].url, k, at) for k in ("storage", "blockhash")}
        print(f"  (one call of each through chainproxy: {seen})", flush=True)
        reps = 3 if p.extras else 1
        pairs = [(s, b) for s in subjects for b in BODIES]
        runs: dict[tuple[str, str], list[Run]] = {}
        for rep in range(reps):
            k = rep % len(pairs)
            for s, b in pairs[k:] + pairs[:k]:
                miss_ratio, kind = BODIES[b]
                run = measure_one(
                    s, C32, "miss" if miss_ratio else "hit", p.tput_s, IDENTICAL, kind, at
                )
                runs.setdefault((s.name, b), []).append(run)
        out = {}
        for b in BODIES:
            bare, cp = runs[(BARE, b)], runs[(CP, b)]
            x = ratio(rps(cp), rps(bare))
            out[b] = x
            r.row(
                f"16. {b}, c=32",
                f"bare {f0(rps(bare))} calls/s ({f0(cpu_req(bare))} µs CPU/call)",
                f"chainproxy {f0(rps(cp))} calls/s ({f0(cpu_req(cp))} µs CPU/call, "
                f"p50 {f0(p50(cp))} ms)",
                f2(x),
            )
            lean = runs.get(("chainproxy lean", b))
            if lean:
                r.row(
                    f"lean mode, {b}",
                    f"bare {f0(rps(bare))} calls/s",
                    f"lean {f0(rps(lean))} calls/s ({f0(cpu_req(lean))} µs CPU/call)",
                    f2(ratio(rps(lean), rps(bare))),
                )
        names = list(BODIES)
        r.goal(
            f"Goal 16 (true miss, distinct calls at c=32, chainproxy ÷ bare mitmdump ≥ 1.5): "
            f"state_getStorage {f2(out[names[1]])}, chain_getBlockHash {f2(out[names[2]])}"
            f"  [identical chain_getHeader, coalesced: {f2(out[names[0]])}; errors "
            f"{sum(errors(v) for v in runs.values())}; one call each: {seen}]"
        )
        r.data["true_miss"] = {
            f"{s}|{b}": {
                "rps": rps(v),
                "cpu_us_per_call": cpu_req(v),
                "p50_ms": p50(v),
                "reps_rps": [round(x.load.rps, 1) for x in v],
            }
            for (s, b), v in runs.items()
        }
        r.data["true_miss_probe"] = seen
