"""Memory of the rate limiter after N distinct client addresses (default 1M).

    python bench/bench_ratelimit_mem.py [--clients 1000000] [--max-clients N] [--json]

Feeds N distinct IPv4 addresses (one call each, 20 000 new clients per
simulated second, so every window is still live when the bound bites) through
``addon.quota.local.RateLimiter`` in a process of its own, with ``max_clients``
at the config default (100 000) unless told otherwise, and reports the
process's RSS before and after, the clients still tracked and the bytes per
tracked client. Driving a million real source addresses through mitmdump
would take a million TCP connections (~30 min at mitmdump's connection rate),
so the limiter is measured on its own; it is the only per-client state the
addon keeps (``client_identity``'s parse cache is bounded at 8192 entries).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from addon.quota.local import RateLimiter, client_identity
from bench.results import print_results
from common.config import RateLimitConfig


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=1_000_000)
    ap.add_argument("--max-clients", type=int, default=RateLimitConfig().max_clients)
    ap.add_argument("--per-second", type=int, default=20_000, help="new clients a second")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    now = [1_000_000.0]
    limiter = RateLimiter(100, 60, max_clients=args.max_clients, clock=lambda: now[0])
    gc.collect()
    before = rss_kb()
    start = time.perf_counter()
    peak = before
    for i in range(args.clients):
        addr = f"{10 + (i >> 24) % 200}.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}"
        limiter.check(client_identity(addr, None, ()), 1)
        if i % args.per_second == args.per_second - 1:
            now[0] += 1.0
        if i % 100_000 == 99_999:
            peak = max(peak, rss_kb())
    elapsed = time.perf_counter() - start
    gc.collect()
    after = rss_kb()
    peak = max(peak, after)
    tracked = len(limiter)
    out = {
        "clients": args.clients,
        "max_clients": args.max_clients,
        "tracked": tracked,
        "evicted": limiter.evicted,
        "rss_before_mb": round(before / 1024, 1),
        "rss_after_mb": round(after / 1024, 1),
        "rss_peak_mb": round(peak / 1024, 1),
        "bytes_per_client": round((after - before) * 1024 / max(1, tracked)),
        "checks_per_s": round(args.clients / elapsed),
    }
    print_results(out, args.json, lambda k, v: f"{k}: {v}")


if __name__ == "__main__":
    main()
