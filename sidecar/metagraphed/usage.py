"""``/api/v1/rpc/usage``: chainproxy's 7-day usage rollups in Metagraphed's shape (pure).

From Metagraphed's ``formatRpcUsage`` (``src/health-serving.ts``): rates are
ratios 0-1 (4 decimals, null without requests), times epoch milliseconds,
``buckets`` one per hour (``bucket_granularity`` ``1h``, as Metagraphed buckets
a 7-day window) with requests, errors and the mean latency. ``coverage`` says
what the numbers are about: from the first hour with traffic to the last
report the proxies delivered. chainproxy keeps 7 days, so ``window=30d`` is
refused by the handler rather than answered with 7 days under a 30-day label.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from common.config import Config
from common.latency_hist import Hist, merge_into, quantile
from common.usage_wire import Counts
from sidecar.usage.stats.window import WindowTotals

SOURCE = "rpc-proxy"


@dataclass(frozen=True, slots=True)
class HourRow:
    """One hour of traffic (``UsageStore.hourly_series``)."""

    hour: int  # floor(unix time / 3600)
    requests: int
    errors: int
    cache_hits: int
    latency_ms_sum: float


def _ratio(n: float, d: float) -> float | None:
    return round(n / d, 4) if d else None


def _avg(c: Counts) -> int | None:
    return round(c.latency_ms_sum / c.requests) if c.requests else None


def rpc_usage(
    totals: WindowTotals,
    hours: Sequence[HourRow],
    config: Config,
    *,
    updated: float | None,
) -> dict[str, Any]:
    networks = tuple(config.proxy.networks)
    total, per_net = Counts(), {n: Counts() for n in networks}
    per_endpoint: dict[str, Counts] = {}
    for (net, eid), c in totals.counts.items():
        if net not in per_net:
            continue
        total.add(c)
        per_net[net].add(c)
        if eid and c.requests:
            per_endpoint.setdefault(eid, Counts()).add(c)
    hist: Hist = {}
    for net in networks:
        merge_into(hist, totals.hists.get(net, {}))
    n = total.requests
    provider = {e.id: e.provider for e in config.endpoints}
    ranked = sorted(per_endpoint.items(), key=lambda kv: (-kv[1].requests, kv[0]))
    start = hours[0].hour * 3_600_000 if hours else None
    end = round(updated * 1000) if updated is not None else None
    return {
        "schema_version": 1,
        "window": "7d",
        "bucket_granularity": "1h",
        "observed_at": end,
        "source": SOURCE,
        "coverage": {
            "start": start,
            "end": end,
            "segments": [{"source": "chainproxy-usage-rollups", "start": start, "end": end}],
            "latency_percentiles": {"start": start, "end": end} if n else None,
        },
        "summary": {
            "total_requests": n,
            "ok_requests": n - total.errors,
            "error_requests": total.errors,
            "error_rate": _ratio(total.errors, n),
            "failover_requests": total.failovers,
            "failover_rate": _ratio(total.failovers, n),
            "cache_hits": total.cache_hits,
            "cache_hit_rate": _ratio(total.cache_hits, n),
            "latency_ms": {
                "p50": _round(quantile(hist, 0.5)) if n else None,
                "p95": _round(quantile(hist, 0.95)) if n else None,
                "avg": _avg(total),
            },
        },
        "endpoints": [
            {
                "rank": rank,
                "endpoint_id": eid,
                "provider": provider.get(eid),
                "requests": c.requests,
                "ok_requests": c.requests - c.errors,
                "error_rate": _ratio(c.errors, c.requests),
                "avg_latency_ms": _avg(c),
            }
            for rank, (eid, c) in enumerate(ranked, start=1)
        ],
        "networks": [
            {
                "network": net,
                "requests": c.requests,
                "ok_requests": c.requests - c.errors,
                "error_rate": _ratio(c.errors, c.requests),
            }
            for net, c in per_net.items()
        ],
        "buckets": [_bucket(h) for h in hours],
    }


def _round(v: float | None) -> int | None:
    return None if v is None else round(v)


def _bucket(h: HourRow) -> dict[str, Any]:
    return {
        "ts": h.hour * 3_600_000,
        "requests": h.requests,
        "errors": h.errors,
        "avg_latency_ms": round(h.latency_ms_sum / h.requests) if h.requests else None,
    }


def hour_rows(rows: Iterable[tuple[Any, ...]]) -> list[HourRow]:
    """``(hour, requests, errors, cache_hits, latency_ms_sum)`` tuples as ``HourRow``s."""
    return [HourRow(int(h), int(r), int(e), int(c), float(s)) for h, r, e, c, s in rows]
