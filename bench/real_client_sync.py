"""Scenario 12 (head pinning, coalescing and hedging with real clients): how many upstream calls a
metagraph-style sync of several real clients costs, counted where the calls
reach a real Substrate runtime.

    .venv/bin/python bench/real_client_sync.py [--clients 5] [--blocks 5] [--json]
    make bench-real            (or: bench/run.py --only 12)

Setup: chopsticks (the Rococo Asset Hub runtime, offline) behind two counting
endpoint fronts (``tests/clients/forwarder.py --count``), the sidecar, and two
chainproxy processes on the same sidecar and endpoints: one with
``coalesce``/``head_pinning``/``hedge`` off, one with the defaults (each with a
data directory, an edge cache, of its own). ``--clients`` async-substrate-interface
processes (``tests/clients/asi/sync_client.py``) connect over WebSocket; after
each of ``--blocks`` new blocks (``dev_newBlock``, straight to chopsticks) all of
them run one sync at once: the head and a raw storage read right after it,
three runtime-API ``state_call``s, three storage reads, a ``query_map`` page, all
without a block hash (the client adds its own ``chain_getHead``,
``chain_getHeader`` and runtime-version calls): 16 calls.

Three runs, in this order: **direct** (the clients on the fast front itself:
upstream = client calls, the counter's own check), **features off**,
**chainproxy**. Upstream calls are the fronts' counts of JSON-RPC calls (a batch
per call; the sidecar's probes counted apart by User-Agent); client calls are
what the clients counted on their sockets; p50/p99 are of one client's whole
sync. Every answer is checked against chopsticks at the block of its sync.
Processes are not pinned to cores here (the figure is the count, not the time).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results import JSON_MARK, json_results

RATE_LIMIT = {"rate_limit": {"requests": 100_000, "window_s": 60}}  # counts, not quotas
PROXY_COUNTERS = ("chainproxy_coalesced_total", "chainproxy_hedged_total")


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def proxy_counters(sidecar_url: str) -> dict[str, float]:
    """The proxies' own coalesced/hedged counters, summed (the sidecar's /metrics)."""
    with urllib.request.urlopen(f"{sidecar_url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for name in PROXY_COUNTERS:
        found = re.findall(rf"^{name}\{{[^}}]*\}} ([0-9.e+]+)$", text, re.M)
        out[name] = sum(float(v) for v in found)
    return out


def measure(clients: int, blocks: int, workdir: Path) -> dict[str, Any]:
    from tests.clients.chopsticks_stack import start_chain_stack
    from tests.clients.js_deps import ensure_js_deps, extract_genesis, js_unavailable
    from tests.clients.sync_runs import ASI_READY, run_all, wrong_answers

    if (why := js_unavailable()) is not None:
        return {"skipped": why}
    if not ASI_READY.exists():
        return {"skipped": "async-substrate-interface venv missing: run `make asi-deps`"}
    ensure_js_deps()
    workdir.mkdir(parents=True, exist_ok=True)
    genesis = extract_genesis(workdir / "genesis.json")
    chain = start_chain_stack(workdir / "stack", genesis, count=True, proxy_extra=RATE_LIMIT)
    try:
        before = proxy_counters(chain.stack.sidecar_url)
        runs = run_all(chain, clients, blocks, workdir / "clients")
        time.sleep(3)  # the proxy's counters reach the sidecar every ~2 s
        after = proxy_counters(chain.stack.sidecar_url)
        return {
            "clients": clients,
            "blocks": blocks,
            "runs": [{**r.summary(), "wrong_answers": wrong_answers(chain, r)[:20]} for r in runs],
            "proxy_counters": {k: after[k] - before[k] for k in PROXY_COUNTERS},
        }
    finally:
        chain.stop()


def table(result: dict[str, Any]) -> str:
    """The result as two Markdown tables: per run, and per method."""
    if "skipped" in result:
        return f"skipped: {result['skipped']}"
    runs = result["runs"]
    lines = [
        f"{result['clients']} clients x {result['blocks']} blocks",
        "",
        "| run | client calls | upstream calls | upstream ÷ client | sync p50 | sync p99"
        " | errors | wrong answers |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        client, up = sum(r["client_calls"].values()), sum(r["upstream_calls"].values())
        lines.append(
            f"| {r['name']} | {client} | {up} | {up / max(1, client):.0%}"
            f" | {_pct(r['sync_seconds'], 0.5) * 1000:.0f} ms"
            f" | {_pct(r['sync_seconds'], 0.99) * 1000:.0f} ms"
            f" | {len(r['errors'])} | {len(r['wrong_answers'])} |"
        )
    methods = sorted({m for r in runs for m in (*r["client_calls"], *r["upstream_calls"])})
    lines += [
        "",
        "| method (upstream / client calls) | " + " | ".join(r["name"] for r in runs) + " |",
        "|---|" + "---|" * len(runs),
    ]
    for m in methods:
        cells = [f"{r['upstream_calls'].get(m, 0)} / {r['client_calls'].get(m, 0)}" for r in runs]
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    c = result["proxy_counters"]
    lines += [
        "",
        f"chainproxy's own counters over the runs: {c['chainproxy_coalesced_total']:.0f}"
        f" calls coalesced, {c['chainproxy_hedged_total']:.0f} hedged attempts",
    ]
    for r in runs:
        for e in [*r["errors"], *r["wrong_answers"]][:5]:
            lines.append(f"  {r['name']}: {e}")
    return "\n".join(lines)


def bench_step(ctx: Any) -> None:
    """``bench/run.py --only 12``: this script in a process of its own (its
    clients and stack stay out of the runner), its result in the report."""
    r = ctx.report
    print("\n[12] upstream calls, real client (async-substrate-interface on chopsticks)")
    size = ["--smoke"] if ctx.p.smoke else ["--quick"] if ctx.p.stats_quick else []
    argv = [sys.executable, __file__, "--json", *size]
    # within the quick run's wall limit (240 s): it takes ~30 s quick, ~60 s in
    # full; the smoke run's lanes share a loaded machine with `make test`'s
    # workers (150 s ran out there once), within its wall limit (300 s)
    timeout = 240 if ctx.p.smoke else 150 if ctx.p.stats_quick else 300
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    result = json_results(done.stdout)
    if result is None or "skipped" in result:
        why = (result or {}).get("skipped") or done.stderr[-500:]
        r.row("12. real-client sync", "-", f"not measured: {why}", "-")
        r.fail(f"not measured: {why}")
        return
    print(table(result), flush=True)
    share = {
        x["name"]: sum(x["upstream_calls"].values()) / max(1, sum(x["client_calls"].values()))
        for x in result["runs"]
    }
    wrong = sum(len(x["wrong_answers"]) + len(x["errors"]) for x in result["runs"])
    if wrong:
        r.fail(f"{wrong} wrong answers or errors (the table above shows the first)")
    r.row(
        f"12. real-client sync ({result['clients']} asi clients x {result['blocks']} blocks),"
        " upstream ÷ client calls",
        f"direct {share['direct']:.0%}, features off {share['features off']:.0%}",
        f"chainproxy {share['chainproxy']:.0%}, {wrong} wrong answers or errors",
        f"{share['chainproxy'] / max(share['features off'], 1e-9):.2f}",
    )
    r.data["real_client_sync"] = result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=5)
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="3 clients, 2 blocks")
    ap.add_argument("--smoke", action="store_true", help="1 client, 1 block: does it run")
    ap.add_argument("--json", action="store_true", help="one result line for bench/run.py")
    ap.add_argument("--dir", type=Path, help="keep logs and configs here (default: a temp dir)")
    args = ap.parse_args()
    clients, blocks = (
        (1, 1) if args.smoke else (3, 2) if args.quick else (args.clients, args.blocks)
    )
    with contextlib.suppress(OSError):  # bench/run.py pinned us to one core: all of them
        os.sched_setaffinity(0, range(os.cpu_count() or 1))
    started = time.monotonic()
    if args.dir is not None:
        result = measure(clients, blocks, args.dir.resolve())
    else:
        with tempfile.TemporaryDirectory(prefix="chainproxy-real-sync-") as tmp:
            result = measure(clients, blocks, Path(tmp))
    result["elapsed_s"] = round(time.monotonic() - started, 1)
    if args.json:
        print(JSON_MARK + json.dumps(result), flush=True)
    else:
        print(table(result))
        print(f"\n{result['elapsed_s']:.0f} s")
    if "skipped" in result:
        return 0
    return 1 if any(r["errors"] or r["wrong_answers"] for r in result["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
