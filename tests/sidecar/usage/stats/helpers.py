"""Shared by the usage statistics tests: the wire form of rollups and batches."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from common import latency_hist
from common.config import Endpoint

NOW = 1_763_700_000.0  # a multiple of 60
MINUTE = int(NOW // 60)
EP_A = "endpoint-srf-" + "a" * 16
EP_B = "endpoint-srf-" + "b" * 16
NETWORKS = ("finney", "test")


def wire_rollup(
    minute: int,
    latencies: Iterable[float],
    *,
    network: str = "finney",
    endpoint: str | None = EP_A,
    method: str = "chain_getHeader",
    errors: int = 0,
    failovers: int = 0,
    cache_hits: int = 0,
) -> dict[str, Any]:
    """A rollup in the agreed wire form, built from individual latencies."""
    hist: latency_hist.Hist = {}
    lat = list(latencies)
    for ms in lat:
        latency_hist.add(hist, ms)
    return {
        "minute": minute,
        "network": network,
        "endpoint": endpoint,
        "method": method,
        "requests": len(lat),
        "errors": errors,
        "failovers": failovers,
        "cache_hits": cache_hits,
        "latency_ms_sum": float(sum(lat)),
        "latency_hist": latency_hist.to_wire(hist),
    }


def wire_batch(rollups: list[dict[str, Any]], batch_id: str | None = None) -> dict[str, Any]:
    return {"batch_id": batch_id or uuid.uuid4().hex, "sent_at": NOW, "rollups": rollups}


def endpoint(eid: str, provider: str, network: str = "finney", archive: bool = False) -> Endpoint:
    return Endpoint(
        url="http://x", provider=provider, kind="node-rpc", network=network, archive=archive, id=eid
    )
