"""Benchmark of the usage statistics: ingest rate and 7-day summary time.

    python bench/bench_stats.py [--quick | --smoke]

Fills a temporary ``usage.sqlite3`` with 10M calls' worth of per-minute rollups
over 7 days (2 networks, 5 upstream endpoints + the cache, 5 methods: ~35
rollups a minute, ~350k rollups), posted as one batch per minute through the
same path as the API minus HTTP (``json.loads`` + ``parse_batch`` +
``UsageStore.ingest``). Then it times:

* the summary (``window_totals`` + ``summarize``, uncached) at a time that
  cuts an hour, median of several runs, for all networks and for one;
* the worst case of ingest: rollups of a single call each (1000 distinct keys
  a batch), merged into existing rows (the conflict path): records/s = rollups/s;
* restart: reopening the store and the first summary.

``--quick`` uses 1M calls and fewer runs; ``--smoke`` (does it still run?) the
last 2 hours only, 20k calls, one run. Stops by itself well within 2 minutes.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common.config import parse_config
from common.latency_hist import bucket_of
from sidecar.usage.stats import WINDOW_S, parse_batch, summarize
from sidecar.usage.store import UsageStore

NOW = 1_763_700_000.0 + 1800  # half past an hour: the window's start cuts an hour
METHODS = (
    "chain_getHeader",
    "chain_getBlockHash",
    "state_getStorage",
    "state_call",
    "system_health",
)


def _config():  # type: ignore[no-untyped-def]
    eps = [
        ("https://a.example", "opentensor", "finney", False),
        ("https://b.example", "opentensor", "finney", True),
        ("https://c.example", "onfinality", "finney", False),
        ("https://d.example", "opentensor", "test", False),
        ("https://e.example", "other", "test", False),
    ]
    return parse_config(
        {
            "registry": {
                "endpoints": [
                    {"url": u, "provider": p, "kind": "node-rpc", "network": n, "archive": a}
                    for u, p, n, a in eps
                ]
            }
        },
        env={},
    )


def _bucket_pools(n_endpoints: int, rng: random.Random) -> list[list[int]]:
    """Per upstream (and the cache, last) a pool of latency buckets to draw from."""
    pools = []
    for i in range(n_endpoints):
        mu = 4.0 + 0.4 * i  # ~55 ms .. ~270 ms medians
        pools.append([bucket_of(rng.lognormvariate(mu, 0.6)) for _ in range(20_000)])
    pools.append([bucket_of(rng.lognormvariate(0.0, 0.5)) for _ in range(20_000)])  # cache
    return pools


def _batches(config, total_requests: int, rng: random.Random, minutes_back: int | None = None):  # type: ignore[no-untyped-def]
    """One JSON body per minute of the 7 days before NOW (or of the last
    ``minutes_back`` minutes), ~total_requests calls."""
    eps = [(e.id, e.network) for e in config.endpoints]
    keys = [(eid, net, i) for i, (eid, net) in enumerate(eps)]
    keys += [(None, net, len(eps)) for net in config.proxy.networks]  # cache hits
    pools = _bucket_pools(len(eps), rng)
    first = int((NOW - WINDOW_S) // 60)
    if minutes_back is not None:
        first = int(NOW // 60) - minutes_back
    minutes = range(first, int(NOW // 60) + 1)
    per_rollup = max(1, round(total_requests / (len(minutes) * len(keys) * len(METHODS))))
    for minute in minutes:
        rollups = []
        for eid, net, pool_i in keys:
            pool = pools[pool_i]
            for method in METHODS:
                n = rng.randint(1, 2 * per_rollup - 1)
                hist = Counter(rng.choices(pool, k=n))
                cache = eid is None
                rollups.append(
                    {
                        "minute": minute,
                        "network": net,
                        "endpoint": eid,
                        "method": method,
                        "requests": n,
                        "errors": 0 if cache else n // 50,
                        "failovers": 0 if cache else n // 100,
                        "cache_hits": n if cache else 0,
                        "latency_ms_sum": float(n * 100),
                        "latency_hist": {str(b): c for b, c in hist.items()},
                    }
                )
        doc = {"batch_id": f"{minute:032x}", "sent_at": minute * 60.0 + 60, "rollups": rollups}
        yield json.dumps(doc).encode(), sum(r["requests"] for r in rollups)


def _ingest(store: UsageStore, networks, bodies) -> tuple[float, int, int]:  # type: ignore[no-untyped-def]
    """(seconds, records, rollups) spent in json.loads + parse_batch + ingest."""
    spent, records, rollups = 0.0, 0, 0
    for body, n in bodies:
        t0 = time.perf_counter()
        batch = parse_batch(json.loads(body), networks, NOW)
        store.ingest(batch, NOW)
        spent += time.perf_counter() - t0
        records += n
        rollups += len(batch.rollups)
    return spent, records, rollups


def _summary_ms(store: UsageStore, config, network: str | None, runs: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        summarize(
            store.window_totals(NOW),
            networks=config.proxy.networks,
            endpoints=config.endpoints,
            network=network,
            updated=store.updated,
            now=NOW,
        )
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1M calls, fewer runs")
    ap.add_argument("--smoke", action="store_true", help="2 hours, 20k calls: does it run")
    args = ap.parse_args()
    total = 20_000 if args.smoke else 1_000_000 if args.quick else 10_000_000
    runs = 1 if args.smoke else 5 if args.quick else 11
    minutes_back = 120 if args.smoke else None
    rng = random.Random(7)
    config = _config()
    nets = config.proxy.networks
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "usage.sqlite3"
        store = UsageStore(path)
        span = "the last 2 hours" if args.smoke else "7 days"
        print(f"filling {span} with ~{total:,} calls ...", flush=True)
        spent, records, rollups = _ingest(store, nets, _batches(config, total, rng, minutes_back))
        rows = store.row_counts()
        size = path.stat().st_size + Path(str(path) + "-wal").stat().st_size
        print(
            f"ingest (bulk, one batch a minute): {records:,} records, {rollups:,} rollups"
            f" in {spent:.1f} s = {records / spent:,.0f} records/s, {rollups / spent:,.0f}"
            " rollups/s"
        )
        print(f"storage: {rows}, {size / 1e6:.1f} MB")

        for network in (None, "finney"):
            ms = _summary_ms(store, config, network, runs)
            print(f"summary network={network or 'all'}: median {ms:.1f} ms over {runs} runs")

        # Worst case: one call per rollup (a quiet proxy flushing every few seconds,
        # many distinct methods): 1000 rollups a batch over the last 2 minutes,
        # merged into rows that exist after the first batch (the conflict path).
        last = int(NOW // 60)
        eids = [e.id for e in config.endpoints if e.network == "finney"]
        n_batches = 2 if args.smoke else 20 if args.quick else 60
        bodies = []
        for i in range(n_batches):
            rollups_ = [
                {
                    "minute": last - j // 500,
                    "network": "finney",
                    "endpoint": eids[j % 3],
                    "method": f"method_{(j // 3) % 167}",
                    "requests": 1,
                    "errors": 0,
                    "failovers": 0,
                    "cache_hits": 0,
                    "latency_ms_sum": 120.0,
                    "latency_hist": {str(bucket_of(50 + (i * 7 + j) % 400)): 1},
                }
                for j in range(1000)
            ]
            doc = {"batch_id": f"{i + 1:08x}" + "f" * 24, "sent_at": NOW, "rollups": rollups_}
            bodies.append((json.dumps(doc).encode(), 1000))
        spent, records, _ = _ingest(store, nets, bodies)
        print(
            f"ingest (worst case: 1 call per rollup, 1000 keys a batch, merging): {records:,}"
            f" records in {spent:.2f} s = {records / spent:,.0f} records/s"
        )
        store.close()

        t0 = time.perf_counter()
        store = UsageStore(path)
        store.window_totals(NOW)
        print(f"restart: reopen + first summary {(time.perf_counter() - t0) * 1000:.1f} ms")
        store.close()
    print(f"total bench time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
