"""The soak's figures: printed, and written into docs/RELIABILITY.md between
its ``soak`` markers (the rest of the file is left as it is). Pure but for
``write``."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.soak.plan import Action
from bench.soak.tally import Tally

BEGIN = "<!-- soak:begin (written by make soak) -->"
END = "<!-- soak:end -->"


@dataclass
class Result:
    seconds: float
    seed: int
    nodes: int
    redis: bool
    tally: Tally
    actions: list[Action]
    restarts: dict[str, int]
    usage_records: int | None
    resources_warm: dict[str, tuple[int, int]]
    resources_end: dict[str, tuple[int, int]]
    warm_s: float
    chaos_failures: list[str]
    upstream_429: int = 0  # answered by the nodes under a rate-limit fault


def during(actions: list[Action], t: float) -> str:
    kinds = sorted({f"{a.kind}" for a in actions if a.at <= t < a.until + 2})
    return "+".join(kinds) or "no fault"


PROXY_STOPS = ("proxy", "rolling", "reload")  # actions that stop a proxy (it closes its sockets)


def in_proxy_restart(actions: list[Action], t: float) -> bool:
    # + 2 s: a socket's close reaches its client a moment after the SIGTERM
    return any(a.kind in PROXY_STOPS and a.at - 1 <= t < a.until + 2 for a in actions)


def cut_by_restart(r: Result) -> list[Any]:
    """WebSocket calls in flight on a socket a stopping proxy closed: the one
    loss a proxy restart costs a client (HTTP calls are retried by HAProxy)."""
    return [
        c
        for c in r.tally.errors()
        if c.detail.startswith("socket") and in_proxy_restart(r.actions, c.t)
    ]


def figures(r: Result) -> dict[str, Any]:
    counts = r.tally.counts()
    cut = cut_by_restart(r)
    counts["error"] = counts.get("error", 0) - len(cut)
    counts["cut"] = len(cut)
    closed = r.tally.sockets_closed
    unexplained = [x for x in closed if not in_proxy_restart(r.actions, x[0])]
    minutes = r.tally.minute_p99()
    worst = max(minutes, key=lambda m: m[1], default=(0, 0.0, 0))
    growth = {}
    replaced = any(r.restarts.get(k) for k in ("rolling", "reload"))  # every proxy is new
    for part, (rss, _fds) in r.resources_end.items():
        warm = r.resources_warm.get(part)
        new = r.restarts.get(part) or (replaced and part.startswith("proxy"))
        if warm and warm[0] and not new:
            growth[part] = round(100 * (rss - warm[0]) / warm[0], 1)
    return {
        "counts": counts,
        "heads": r.tally.head_figures(),
        "worst_minute": {"minute": worst[0], "p99_ms": round(worst[1], 1), "calls": worst[2]},
        "rss_growth_pct": growth,
        "usage_records": r.usage_records,
        "sockets_closed": len(closed),
        "sockets_closed_unexplained": len(unexplained),
    }


def render(r: Result) -> str:
    f = figures(r)
    c = f["counts"]
    h = f["heads"]
    kinds = Counter(a.kind for a in r.actions)
    cut = {id(c) for c in cut_by_restart(r)}
    errors = [e for e in r.tally.errors() if id(e) not in cut]
    by_cause = Counter((during(r.actions, e.t), e.detail[:90]) for e in errors)
    lines = [
        BEGIN,
        f"### Last soak: {r.seconds:.0f} s, seed {r.seed}, {r.nodes} simulated nodes, "
        f"two proxies behind HAProxy{', Redis' if r.redis else ''}",
        "",
        "Chaos actions: "
        + ", ".join(f"{k} x {n}" for k, n in sorted(kinds.items()))
        + f" ({len(r.actions)} in all; restarts done: "
        + (", ".join(f"{k} {v}" for k, v in sorted(r.restarts.items())) or "none")
        + ")",
        "",
        "| figure | value | goal |",
        "|---|---|---|",
        f"| calls sent (a batch of n is n) | {c['sent']:,} | |",
        f"| answered (results and node errors) / refused as asked (403, 429) | "
        f"{c.get('ok', 0):,} / {c.get('refused', 0):,} | |",
        f"| client-visible errors while ≥ 1 healthy upstream existed | {c.get('error', 0)} | 0 |",
        f"| 429s the rate-limited nodes answered (rate_limit, retry_after) | "
        f"{r.upstream_429:,} | |",
        f"| usage records in the sidecar / calls that must leave one | "
        f"{f['usage_records'] if f['usage_records'] is not None else 'unread'} / {c['recorded']:,} "
        "| equal |",
        f"| head subscriptions / with a gap / with a duplicate | "
        f"{h['subscriptions']} / {h['with_gap']} / {h['with_duplicate']} | - / 0 / 0 |",
        f"| heads delivered / reorgs / fork switches without one / longest silence | "
        f"{h['delivered']:,} / {h['reorgs']} / {h['unlinked']} / "
        f"{h['longest_silence_s']:.1f} s | |",
        f"| client sockets closed: in all / not by a proxy restart | {f['sockets_closed']} / "
        f"{f['sockets_closed_unexplained']} | - / 0 |",
        f"| WebSocket calls in flight on a socket a stopping proxy closed | {c['cut']} | |",
        f"| worst minute's p99 | {f['worst_minute']['p99_ms']} ms (minute "
        f"{f['worst_minute']['minute']}, {f['worst_minute']['calls']} calls) | |",
    ]
    for part in sorted(r.resources_end):
        warm = r.resources_warm.get(part, (0, 0))
        end = r.resources_end[part]
        note = (
            f"{f['rss_growth_pct'][part]:+.1f} %"
            if part in f["rss_growth_pct"]
            else f"restarted {r.restarts.get(part, 0)}x"
            if r.restarts.get(part)
            else "replaced by a reload"
        )
        lines.append(
            f"| {part}: RSS after {r.warm_s:.0f} s warm-up → end; open fds | "
            f"{warm[0] / 1024:.1f} → {end[0] / 1024:.1f} MiB ({note}); {warm[1]} → {end[1]} "
            "| growth < 10 % |"
        )
    if by_cause:
        lines += ["", "Errors by what was failing at the time, and what the client saw:", ""]
        lines += [
            f"* {n} x during {cause}: `{detail}`" for (cause, detail), n in by_cause.most_common(12)
        ]
    if r.tally.sockets_closed:
        lines += ["", "Client sockets closed:", ""]
        lines += [
            f"* {t:.0f} s (during {during(r.actions, t)}): {why}"
            for t, why in r.tally.sockets_closed[:12]
        ]
    slow = sorted((c for c in r.tally.calls if c.outcome != "error"), key=lambda c: -c.latency_ms)
    if slow and slow[0].latency_ms > 1000:
        lines += ["", "Slowest answers (what was failing at the time):", ""]
        lines += [
            f"* {c.latency_ms:,.0f} ms at {c.t:.0f} s, {c.kind} {c.method} "
            f"(during {during(r.actions, c.t)})"
            for c in slow[:6]
        ]
    if r.chaos_failures:
        lines += ["", "Chaos steps that failed:", ""] + [f"* {x}" for x in r.chaos_failures]
    lines += [
        "",
        "Per minute (p99 ms / calls): "
        + ", ".join(f"{m}: {p:.0f}/{n}" for m, p, n in r.tally.minute_p99()),
        END,
    ]
    return "\n".join(lines)


def write(path: Path, text: str) -> None:
    doc = path.read_text() if path.exists() else "# Reliability\n"
    if BEGIN in doc and END in doc:
        head, rest = doc.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        doc = head + text + tail
    else:
        doc = doc.rstrip("\n") + "\n\n" + text + "\n"
    path.write_text(doc)
