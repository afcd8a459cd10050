"""Scenarios 6, 8 and the addon's own CPU: benchmarks that are scripts of their
own (``bench/bench_*.py``), each run in a fresh process once the proxies are
stopped, so nothing else competes for the cores; their output goes into the
report."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from bench.context import Context
from bench.results import json_results
from bench.stack import REPO


class ScriptFailed(RuntimeError):
    """A benchmark script exited non-zero or printed no result."""


def run_script(name: str, *args: str) -> str:
    """``bench/<name>`` with ``args``: its standard output; ``ScriptFailed`` (with
    the end of its standard error) when it exits non-zero."""
    argv = [sys.executable, str(REPO / "bench" / name), *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO)
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        raise ScriptFailed(f"{name} exited {done.returncode}: {tail}")
    return done.stdout


def size_args(ctx: Context) -> list[str]:
    """The size flag a script takes: ``--smoke``, ``--quick`` or none (full)."""
    return ["--smoke"] if ctx.p.smoke else ["--quick"] if ctx.p.stats_quick else []


def stats(ctx: Context) -> None:
    r = ctx.report
    print("\n[6] usage statistics (bench/bench_stats.py)", flush=True)
    out = run_script("bench_stats.py", *size_args(ctx))
    ingest = re.search(r"ingest \(bulk.*?: ([\d,]+) records.*?= ([\d,]+) records/s", out)
    worst = re.search(r"ingest \(worst.*?= ([\d,]+) records/s", out)
    summ = re.search(r"summary network=all: median ([\d.]+) ms", out)
    if not (ingest and worst and summ):
        raise ScriptFailed(f"bench_stats.py printed no figures: {out[-300:]!r}")
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


def memory(ctx: Context) -> None:
    r = ctx.report
    n = ctx.p.mem_clients
    print(f"\n[8] rate limiter memory after {n:,} distinct clients", flush=True)
    d = json_results(run_script("bench_ratelimit_mem.py", "--clients", str(n), "--json"))
    if d is None:
        raise ScriptFailed("bench_ratelimit_mem.py printed no result")
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


def addon_cpu(ctx: Context) -> None:
    r = ctx.report
    print("\n[+] the addon's own CPU per request (bench/bench_addon.py)", flush=True)
    out = run_script("bench_addon.py", "--json", *size_args(ctx))
    d = json_results(out)
    if d is None:
        raise ScriptFailed("bench_addon.py printed no result")
    r.row(
        "addon stages alone (no mitmproxy, no network)",
        "-",
        f"miss {d['miss']:.0f} µs, hit {d['hit']:.0f} µs CPU/req",
        "-",
    )
    r.data["addon_us"] = d


def fanout(ctx: Context) -> None:
    r = ctx.report
    # 50 clients, one socket each (more than the per-client socket cap, 32, so a
    # cap that counted sockets per proxy, not per client, would fail it even here)
    size = (
        ["--subscribers", "100", "--blocks", "2", "--interval", "0.05"]
        if ctx.p.smoke
        else ["--blocks", "20" if ctx.p.stats_quick else "60"]
    )
    n = int(size[1]) if ctx.p.smoke else 1000
    print(f"\n[9] subscription fan-out: {n:,} subscribers over 50 sockets", flush=True)
    out = run_script("bench_fanout.py", *size)
    line = next((ln for ln in out.splitlines() if ln.startswith("BENCHJSON-FANOUT ")), None)
    if line is None:
        raise ScriptFailed("bench_fanout.py printed no result")
    d = json.loads(line.split(" ", 1)[1])
    if d["deliveries"] != d["expected"]:
        r.fail(f"{d['deliveries']}/{d['expected']} notifications delivered")
    r.row(
        f"9. fan-out, node -> last of {n:,} subscribers",
        f"{d['upstream_subscriptions']} upstream subscription(s), "
        f"{d['deliveries']}/{d['expected']} delivered",
        f"p50 {d['last_p50_ms']:.1f} ms, p99 {d['last_p99_ms']:.1f} ms, "
        f"{d['cpu_us_per_notification']:.1f} µs proxy CPU per notification",
        "-",
    )
    r.goal(
        f"Fan-out: {n:,} subscribers on 50 sockets (50 clients) share "
        f"{d['upstream_subscriptions']} upstream subscription; node notification to the last"
        f" subscriber p99 {d['last_p99_ms']:.1f} ms (goal <= 50 ms);"
        f" {d['cpu_us_per_notification']:.1f} µs proxy CPU per notification"
    )
    r.data["fanout"] = d
