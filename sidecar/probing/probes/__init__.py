"""Endpoint probes: one per endpoint kind, plus ``probe`` to pick the right one.

Every probe takes a ``ProbeCall`` (the endpoint, a shared
``aiohttp.ClientSession``, a timeout for the whole probe, the kind, an
injected clock and the network's genesis) and returns a ``ProbeResult``; it
never raises (except ``asyncio.CancelledError``) and never shows the endpoint
URL.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import aiohttp

from common.config import Endpoint
from sidecar.probing.probes.artifact import probe_artifact
from sidecar.probing.probes.base import Clock, Observation, ProbeCall, run_probe
from sidecar.probing.probes.classify import (
    ProbeFailure,
    classify_exception,
    classify_rpc_error,
    classify_status,
    safe_detail,
)
from sidecar.probing.probes.node import node_checks, probe_node_rpc, probe_node_wss
from sidecar.probing.probes.sse import SseEventDetector, probe_sse
from sidecar.probing.results import UNKNOWN, ProbeKind, ProbeResult

__all__ = [
    "Clock",
    "Observation",
    "ProbeCall",
    "ProbeFailure",
    "SseEventDetector",
    "classify_exception",
    "classify_rpc_error",
    "classify_status",
    "node_checks",
    "probe",
    "probe_artifact",
    "probe_node_rpc",
    "probe_node_wss",
    "probe_sse",
    "run_probe",
    "safe_detail",
]

# The probe of each endpoint kind; node probes also check the chain's genesis.
_PROBES: dict[str, Callable[[ProbeCall], Awaitable[ProbeResult]]] = {
    "node-rpc": probe_node_rpc,
    "node-wss": probe_node_wss,
    "data-artifact": probe_artifact,
    "sse": probe_sse,
}


async def probe(
    endpoint: Endpoint,
    session: aiohttp.ClientSession,
    *,
    kind: ProbeKind = "full",
    timeout_s: float,
    clock: Clock = time.time,
    genesis: str | None = None,
) -> ProbeResult:
    """Probe ``endpoint`` by its kind. For data-artifact and sse endpoints a "head"
    probe is the full probe (the result keeps the requested ``kind``); ``genesis``
    only matters to node endpoints' full probes."""
    run = _PROBES.get(endpoint.kind)
    if run is not None:
        call = ProbeCall(
            endpoint, session, timeout_s=timeout_s, kind=kind, clock=clock, genesis=genesis
        )
        return await run(call)
    return ProbeResult(
        endpoint_id=endpoint.id,
        at=clock(),
        kind=kind,
        classification=UNKNOWN,
        detail=safe_detail(f"no probe for endpoint kind {endpoint.kind}", endpoint.url),
    )
