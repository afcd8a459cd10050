"""Scenario 17's figures (pure): what a read's headers say the proxy did,
one variant's sync latencies and upstream reads per block, the goal, and the
proxies' own reads among what the nodes logged (``/_sim/arrivals``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.cross_check_cost import pct

TRIGGERS = ("subscription", "polling")
READ_METHODS = ("state_call", "state_getStorage", "state_getKeysPaged")


def cache_kind(headers: Any) -> str:
    """What the proxy did with a read: ``hit`` (cache), ``joined`` (a call
    already in flight), or ``miss``."""
    if str(headers.get("X-Cache", "")).upper() == "HIT":
        return "hit"
    return "joined" if headers.get("X-Chainproxy-Coalesced") else "miss"


def block_number(header: Any) -> int | None:
    try:
        return int(header["number"], 16)
    except (TypeError, KeyError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class Sync:
    """One client's sync at one block."""

    block: int
    client: int
    start: float  # when the client learned the block (monotonic seconds)
    latency_s: float
    errors: int
    first_read: str  # cache_kind of its get_all_dynamic_info


@dataclass
class Phase:
    """One variant's run: its syncs, measured blocks and upstream reads."""

    syncs: list[Sync] = field(default_factory=list)
    measured: list[int] = field(default_factory=list)  # block numbers
    upstream: dict[str, int] = field(default_factory=dict)  # method -> calls, measured blocks
    proxy_cpu_s: float = 0.0  # the proxy's CPU over the measured blocks


def firsts(syncs: list[Sync], blocks: list[int]) -> list[Sync]:
    """Per measured block, the sync of the client that learned it first."""
    best: dict[int, Sync] = {}
    wanted = set(blocks)
    for s in syncs:
        if s.block in wanted and (s.block not in best or s.start < best[s.block].start):
            best[s.block] = s
    return [best[b] for b in sorted(best)]


def summarise(phases: list[Phase]) -> dict[str, Any]:
    """One variant's figures over its phases."""
    first = [s for p in phases for s in firsts(p.syncs, p.measured)]
    every = [s for p in phases for s in p.syncs if s.block in set(p.measured)]
    blocks = sum(len(p.measured) for p in phases)
    upstream = {m: sum(p.upstream.get(m, 0) for p in phases) for m in READ_METHODS}
    kinds = {k: sum(1 for s in first if s.first_read == k) for k in ("hit", "joined", "miss")}
    cpu = sum(p.proxy_cpu_s for p in phases)
    return {
        "blocks": blocks,
        "first_p50_ms": pct([s.latency_s for s in first], 0.5) * 1000,
        "first_p99_ms": pct([s.latency_s for s in first], 0.99) * 1000,
        "all_p50_ms": pct([s.latency_s for s in every], 0.5) * 1000,
        "all_p99_ms": pct([s.latency_s for s in every], 0.99) * 1000,
        "first_read": kinds,
        "syncs": len(every),
        "errors": sum(s.errors for s in every),
        "upstream_per_block": sum(upstream.values()) / blocks if blocks else float("nan"),
        "upstream_by_method": {m: n / blocks for m, n in upstream.items()} if blocks else {},
        "proxy_cpu_ms_per_block": cpu * 1000 / blocks if blocks else float("nan"),
    }


def verdict(runs: dict[tuple[str, str], dict[str, Any]], reads: int) -> dict[str, Any]:
    """Per trigger: the first client's p50 on ÷ off, and the issue's goal with
    pre-warm on: the first client's heavy read warm (a hit or joined in flight)
    at every measured block, at most one upstream call per read (``reads`` in a
    sync) per block."""
    out: dict[str, Any] = {}
    for trig in TRIGGERS:
        on, off = runs[trig, "on"], runs[trig, "off"]
        warm = on["first_read"]["hit"] + on["first_read"]["joined"]
        out[trig] = {
            "first_p50_ratio": on["first_p50_ms"] / off["first_p50_ms"],
            "warm_share": warm / on["blocks"] if on["blocks"] else float("nan"),
            "goal_met": warm == on["blocks"]
            and on["upstream_per_block"] <= reads + 0.5
            and on["errors"] == 0,
        }
    return out


PROXY_AGENT = "chainproxy"  # the proxy's upstream User-Agent (the sidecar's differs)


def proxy_reads(arrivals: list[dict[str, Any]], since: float, until: float) -> dict[str, int]:
    """The sync's methods the proxies sent in ``(since, until]``, from a node's
    ``/_sim/arrivals`` entries (a batch counts each call it names)."""
    out = dict.fromkeys(READ_METHODS, 0)
    for a in arrivals:
        if a["agent"] != PROXY_AGENT or not since < a["t"] <= until:
            continue
        for m in a["methods"]:
            if m in out:
                out[m] += 1
    return out
