"""A realistic usage batch with a ``metrics`` section (``common.metrics_wire``),
shared by the sidecar's metrics tests and the deploy tests: one of each kind
of row, so every metric name the dashboard and the alert rules use has a
sample after the sidecar took it."""

from __future__ import annotations

import uuid
from typing import Any

from common.metrics_wire import DURATION_BUCKETS, EXTRA_COUNTERS


def metrics_section(
    endpoints: list[str],
    *,
    proxy_id: str = "proxy-host:4242",
    network: str = "finney",
    spool: int = 3,
) -> dict[str, Any]:
    """Counter deltas of a proxy that served a little traffic on ``network``
    through ``endpoints`` (ids), with one failover and one retried timeout."""
    first, *rest = endpoints
    durations = [0] * (len(DURATION_BUCKETS) + 1)
    durations[0], durations[3], durations[6], durations[-1] = 4, 10, 2, 1  # 17 calls
    return {
        "proxy_id": proxy_id,
        "requests": [
            [network, "chain_getHeader", "ok", 10],
            [network, "chain_getBlock", "cache_hit", 4],
            [network, "state_getStorage", "error", 1],
            [network, "other", "refused", 1],
            [network, "chain_getHeader", "rate_limited", 1],
        ],
        "duration": [[network, durations, 4.2 + 20.5]],
        "attempts": [
            [first, "ok", 11],
            [first, "timeout", 1],
            *[[e, "http-5xx", 1] for e in rest],
            [first, "soft:state-discarded", 1],
        ],
        "failovers": [[network, 1]],
        "extra": [[name, {"network": network}, 1] for name in EXTRA_COUNTERS[:2]]
        + [
            ["chainproxy_redis_fallbacks_total", {"store": "ratelimit"}, 2],
            ["chainproxy_subscription_moves_total", {"network": network}, 1],
            ["chainproxy_cache_errors_total", {"op": "write"}, 1],  # an alert's input
        ],
        "gauges": {
            "ws_connections": 2,
            "spool_batches": spool,
            "client_subscriptions": {"chain_subscribeNewHeads": 3},
            "upstream_subscriptions": {"chain_subscribeNewHeads": 1},
        },
    }


def batch_with_metrics(
    metrics: dict[str, Any],
    *,
    sent_at: float,
    rollups: list[dict[str, Any]] | None = None,
    batch_id: str | None = None,
) -> dict[str, Any]:
    return {
        "batch_id": batch_id or uuid.uuid4().hex,
        "sent_at": sent_at,
        "rollups": rollups or [],
        "metrics": metrics,
    }
