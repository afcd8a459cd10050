"""Scenarios 19 and 20, the new JSON-RPC spec chainproxy serves itself: each a
script of its own (``bench/bench_follow_fanout.py``,
``bench/bench_chain_head_storage.py``) run in a fresh process once the other
stacks are stopped, as scenario 9 is; their figures into the report.

19 prints the follow fan-out beside the legacy fan-out it measures on the same
proxy, and beside scenario 9's figure when scenario 9 ran earlier in this run.
A scenario fails (``Report.fail``) when a notification went missing, a
follow was stopped, an unpin was refused, or the follows held more than the
two head subscriptions at the node; 20 when an item or a value was wrong (the
script exits non-zero)."""

from __future__ import annotations

from typing import Any

from bench.context import Context
from bench.results import json_results
from bench.scripts import ScriptFailed, run_script

# seconds each adds to the runner's time limit: quick, full
FOLLOW_WALL_S = (40.0, 90.0)
STORAGE_WALL_S = (20.0, 30.0)


def follow_fanout(ctx: Context) -> None:
    r = ctx.report
    if ctx.p.smoke:
        size = ["--subscribers", "10", "--sockets", "5", "--blocks", "2", "--rounds", "1"]
        size += ["--interval", "0.05"]
    else:
        size = ["--blocks", "10" if ctx.p.stats_quick else "30"]
    print("\n[19] chainHead_v1_follow fan-out beside legacy heads", flush=True)
    d = json_results(run_script("bench_follow_fanout.py", *size))
    if d is None:
        raise ScriptFailed("bench_follow_fanout.py printed no result")
    fo, lg = d["follow"], d["legacy"]
    n, s = d["subscribers"], d["sockets"]
    _check(ctx, fo, lg)
    per_block = ", ".join(f"{m} {c:g}" for m, c in sorted(fo["node_calls_per_block"].items()))
    r.row(
        f"19. follow fan-out, node -> last of {n:,} followers ({s} sockets)",
        f"legacy heads p50 {lg['last_p50_ms']:.1f} ms, p99 {lg['last_p99_ms']:.1f} ms",
        f"newBlock p50 {fo['last_p50_ms']:.1f} ms, p99 {fo['last_p99_ms']:.1f} ms"
        f" ({fo['deliveries']}/{fo['expected']})",
        f"p99 {ratio(fo['last_p99_ms'], lg['last_p99_ms'])}",
    )
    r.row(
        "19. follow fan-out: first -> last follower, every delivery",
        f"legacy p99 {lg['spread_p99_ms']:.1f} / {lg['every_p99_ms']:.1f} ms",
        f"follow p99 {fo['spread_p99_ms']:.1f} / {fo['every_p99_ms']:.1f} ms",
        f"{ratio(fo['spread_p99_ms'], lg['spread_p99_ms'])} / "
        f"{ratio(fo['every_p99_ms'], lg['every_p99_ms'])}",
    )
    r.row(
        "19. follow fan-out: proxy CPU per head, per block",
        f"legacy {lg['cpu_us_per_head']:.1f} µs, {lg['cpu_ms_per_block']:.1f} ms",
        f"follow {fo['cpu_us_per_head']:.1f} µs, {fo['cpu_ms_per_block']:.1f} ms"
        f" ({fo['cpu_us_per_notification']:.1f} µs per event, unpins included)",
        ratio(fo["cpu_ms_per_block"], lg["cpu_ms_per_block"]),
    )
    r.row(
        "19. follow fan-out: upstream at the node",
        "-",
        f"{fo['upstream_subscriptions']} head subscriptions {fo['held']}; per block:"
        f" {per_block or 'no call'}",
        "-",
    )
    s9 = r.data.get("fanout")  # scenario 9, when it ran earlier in this run
    if s9:
        r.row(
            "19. follow fan-out beside scenario 9 (this run)",
            f"scenario 9 p50 {s9['last_p50_ms']:.1f} ms, p99 {s9['last_p99_ms']:.1f} ms",
            f"follow p50 {fo['last_p50_ms']:.1f} ms, p99 {fo['last_p99_ms']:.1f} ms",
            f"p99 {ratio(fo['last_p99_ms'], s9['last_p99_ms'])}",
        )
    beside9 = f"; scenario 9 p99 {s9['last_p99_ms']:.1f} ms" if s9 else ""
    r.goal(
        f"Follow fan-out: {n:,} chainHead_v1_follow on {s} sockets hold"
        f" {fo['upstream_subscriptions']} head subscriptions at the node (goal 2); node head"
        f" to the last follower's newBlock p99 {fo['last_p99_ms']:.1f} ms against"
        f" {lg['last_p99_ms']:.1f} ms for legacy heads on the same proxy"
        f" ({ratio(fo['last_p99_ms'], lg['last_p99_ms'])}){beside9}"
    )
    r.data["follow_fanout"] = d


def _check(ctx: Context, fo: dict[str, Any], lg: dict[str, Any]) -> None:
    r = ctx.report
    for kind, x in (("follow", fo), ("legacy", lg)):
        if x["deliveries"] != x["expected"]:
            r.fail(f"{kind}: {x['deliveries']}/{x['expected']} head notifications delivered")
    if fo["stops"]:
        r.fail(f"{fo['stops']} follow(s) stopped")
    if fo["unpin_errors"]:
        r.fail(f"{fo['unpin_errors']} chainHead_v1_unpin call(s) refused")
    if fo["upstream_subscriptions"] > 2:
        r.fail(f"the follows held {fo['held']} at the node, more than 2 head subscriptions")


def chain_head_storage(ctx: Context) -> None:
    r = ctx.report
    keys = 10 if ctx.p.smoke else 100
    reps = 1 if ctx.p.smoke else 4 if ctx.p.stats_quick else 10
    print(f"\n[20] chainHead_v1_storage of {keys} keys against {keys} state_getStorage", flush=True)
    d = json_results(
        run_script("bench_chain_head_storage.py", "--keys", str(keys), "--reps", str(reps))
    )
    if d is None:
        raise ScriptFailed("bench_chain_head_storage.py printed no result")
    st, lg = d["storage"], d["legacy"]
    r.row(
        f"20. {keys} keys at one block: upstream calls at the node",
        f"{keys} state_getStorage: {lg['calls']:g}",
        f"1 chainHead_v1_storage: {st['calls']:g}",
        f"{d['calls_ratio']:.1f}x (legacy/storage)",
    )
    r.row(
        f"20. {keys} keys at one block: wall time (median of {reps})",
        f"{lg['ms']:.1f} ms",
        f"{st['ms']:.1f} ms",
        f"{d['time_ratio']:.2f}x (legacy/storage)",
    )
    r.goal(
        f"chainHead_v1_storage: {keys} value items at one pinned block cost {st['calls']:g}"
        f" upstream call(s) against {lg['calls']:g} for {keys} state_getStorage"
        f" ({d['calls_ratio']:.0f}x fewer), in {st['ms']:.1f} ms against {lg['ms']:.1f} ms"
        f" ({d['time_ratio']:.1f}x)"
    )
    r.data["chain_head_storage"] = d


def ratio(x: float, base: float) -> str:
    return f"{x / base:.2f}x" if base > 0 else "n/a"
