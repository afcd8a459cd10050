"""Why the slow-node scenario's tail moved: scenario 4's stack (three
simulated nodes, a sidecar probing them, chainproxy) with one node at 300 ms,
a paced client that keeps what chainproxy says of each call.

    python bench/slow_tail.py [--seconds 20] [--rate 200] [--body runtime|distinct]

Every call's latency is kept with its ``X-Cache``, ``X-Chainproxy-Upstream``,
``-Coalesced`` and ``-Pinned`` headers and the time it was sent, so the slow
calls (over 50 ms) can be told apart: sent to the slow node, waiting behind
an identical call that went there (coalesced), or neither. ``--body runtime``
is scenario 4's ``state_getRuntimeVersion()`` (hash-optional: pinned to the
head and cached per block since head pinning); ``distinct`` a
``state_getStorage`` of a new key every call (never cached, never coalesced).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.context import FULL, Context
from bench.faults import FAULT_BODY, FAULT_METHOD, SLOW_METHOD, FaultBench
from bench.measure import RPC_PATH, schedstat
from bench.report import Report
from bench.wsload import miss_key

SLOW_MS = 50.0
HEADERS = (
    b"x-cache",
    b"x-chainproxy-upstream",
    b"x-chainproxy-coalesced",
    b"x-chainproxy-pinned",
    b"x-chainproxy-attempts",
    b"x-chainproxy-hedged",
)


@dataclass(frozen=True, slots=True)
class Sample:
    sent_s: float  # since the run started
    ms: float
    cache: str
    upstream: str
    coalesced: bool
    pinned: str
    attempts: int
    hedged: bool


def call_body(kind: str, i: int, nonce: int) -> bytes:
    if kind == "runtime":
        return FAULT_BODY
    doc = {"jsonrpc": "2.0", "id": i, "method": "state_getStorage", "params": [miss_key(nonce, i)]}
    return json.dumps(doc).encode()


def parse_head(head: bytes) -> tuple[int, dict[bytes, str]]:
    """Content-Length and the headers of interest of one response head."""
    length, found = 0, {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name in HEADERS:
            found[name] = value.strip().decode()
    return length, found


async def both(
    url: str, canary: str, rate: float, seconds: float, kind: str
) -> tuple[list[Sample], list[Sample]]:
    """The proxy's calls and, beside them, 40 calls/s straight to a healthy node:
    a stall both see is the machine's (client, nodes), one only the proxy's
    calls see is the proxy's (or its core's)."""
    a, b = await asyncio.gather(
        paced(url, rate, seconds, kind), paced(canary, 40, seconds, kind, conns=2)
    )
    return a, b


async def paced(url: str, rate: float, seconds: float, kind: str, conns: int = 8) -> list[Sample]:
    """``rate`` calls/s over ``conns`` connections, each on its own slot grid
    (as ``bench/pyload.py``); every answer's headers kept."""
    parts = urlsplit(url)
    out: list[Sample] = []
    t_start = time.monotonic()
    stop = t_start + seconds
    interval = conns / rate
    nonce = int.from_bytes(os.urandom(4), "big")
    counter = iter(range(1 << 40))

    async def worker(k: int) -> None:
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        next_at = t_start + interval * k / conns
        while time.monotonic() < stop:
            delay = next_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            next_at += interval
            now = time.monotonic()
            if next_at <= now:
                next_at += interval * (int((now - next_at) / interval) + 1)
            body = call_body(kind, next(counter), nonce)
            t0 = time.monotonic()
            writer.write(
                f"POST {parts.path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            length, h = parse_head(await reader.readuntil(b"\r\n\r\n"))
            await reader.readexactly(length)
            out.append(
                Sample(
                    t0 - t_start,
                    (time.monotonic() - t0) * 1000,
                    h.get(b"x-cache", "-"),
                    h.get(b"x-chainproxy-upstream", "-"),
                    b"x-chainproxy-coalesced" in h,
                    h.get(b"x-chainproxy-pinned", "-"),
                    int(h.get(b"x-chainproxy-attempts", "0")),
                    b"x-chainproxy-hedged" in h,
                )
            )
        writer.close()

    await asyncio.gather(*(worker(k) for k in range(conns)))
    return out


def p99(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(0.99 * len(s)))] if s else 0.0


def explain(samples: list[Sample], slow_upstream: str) -> dict[str, object]:
    """The slow calls by cause, and the p99 with and without each cause."""
    causes: Counter[str] = Counter()
    for s in samples:
        if s.ms < SLOW_MS:
            continue
        causes[cause(s, slow_upstream)] += 1
    n = max(1, len(samples))
    return {
        "calls": len(samples),
        "p50_ms": round(sorted(x.ms for x in samples)[len(samples) // 2], 1) if samples else 0,
        "p99_ms": round(p99([x.ms for x in samples]), 1),
        "p99_without_hedged_or_slow_ms": round(
            p99([x.ms for x in samples if not x.hedged and x.upstream != slow_upstream]), 1
        ),
        "hits_pct": round(100 * sum(x.cache == "HIT" for x in samples) / n, 2),
        "coalesced_pct": round(100 * sum(x.coalesced for x in samples) / n, 2),
        "pinned_pct": round(100 * sum(x.pinned != "-" for x in samples) / n, 2),
        "hedged_pct": round(100 * sum(x.hedged for x in samples) / n, 2),
        "answered_by_slow_pct": round(
            100 * sum(x.upstream == slow_upstream for x in samples) / n, 2
        ),
        "slow_calls": dict(causes),
        "slowest": sorted(
            (round(x.ms), round(x.sent_s, 2), cause(x, slow_upstream)) for x in samples
        )[-5:],
        # when the slow calls were sent (s into the run): bursts are stalls, not nodes
        "slow_at_s": sorted({round(x.sent_s, 1) for x in samples if x.ms >= SLOW_MS}),
    }


def cause(s: Sample, slow_upstream: str) -> str:
    if s.hedged and s.coalesced:
        return "coalesced behind a hedged call"
    if s.hedged:
        return "hedged (its first node was slow)"
    if s.upstream == slow_upstream:
        return "answered by the slow node" + (", coalesced" if s.coalesced else "")
    if s.cache == "HIT":
        return "cache hit"
    return "a healthy node" + (", coalesced" if s.coalesced else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--body", choices=("runtime", "distinct"), default="runtime")
    ap.add_argument("--hedge", default="", help="proxy.hedge as JSON, e.g. '{\"enabled\": false}'")
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="chainproxy-slow-tail-") as tmp:
        ctx = Context(FULL, Path(tmp), Report())
        if len(cpus) >= 2:
            os.sched_setaffinity(0, {cpus[0]})
        fb = FaultBench(ctx, {"hedge": json.loads(args.hedge)} if args.hedge else None)
        try:
            fb.start()
            assert fb.cp_sim is not None
            url = fb.cp_sim.url + RPC_PATH
            asyncio.run(paced(url, args.rate, 2, args.body))  # warm: latencies learned
            routes = json.loads(urllib_get(f"{fb.sidecar_b}/api/v1/internal/routes/finney"))[
                "upstreams"
            ]
            slow = fb.nodes[0]
            slow_id = next(u["id"] for u in routes if u["url"].rstrip("/") == slow.url)
            for phase in ("healthy", "slow"):
                slow.control(latency_ms=300 if phase == "slow" else 0)
                # the method only the benchmark sends (the probes read the runtime too)
                method = SLOW_METHOD if args.body == "distinct" else FAULT_METHOD
                before = fb.node_calls(method)
                s0 = schedstat(fb.cp_sim.pids[0])
                samples, canary = asyncio.run(
                    both(url, fb.nodes[1].url + RPC_PATH, args.rate, args.seconds, args.body)
                )
                s1 = schedstat(fb.cp_sim.pids[0])
                got = fb.node_calls(method)[0] - before[0]
                doc = {"sent_to_slow_node": got, **explain(samples, slow_id)}
                # CPU the proxy used, and time it was ready to run but another
                # process had its core (other sessions' work on a shared machine)
                doc["proxy_cpu_s"] = round(s1[0] - s0[0], 2)
                doc["proxy_runqueue_wait_s"] = round(s1[1] - s0[1], 2)
                doc["canary_direct_p99_ms"] = round(p99([x.ms for x in canary]), 1)
                doc["canary_slow_at_s"] = sorted(
                    {round(x.sent_s, 1) for x in canary if x.ms >= SLOW_MS}
                )
                print(phase, json.dumps(doc), flush=True)
            slow.control(latency_ms=0)
        finally:
            ctx.stack.stop()
    return 0


def urllib_get(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


if __name__ == "__main__":
    sys.exit(main())
