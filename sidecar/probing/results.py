"""Records shared by the sidecar's domain modules (no I/O, no aiohttp)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ProbeKind = Literal["full", "head"]

# Kinds that are chain nodes: they report block heights and get head tracking.
NODE_KINDS = ("node-rpc", "node-wss")

LIVE = "live"
UNKNOWN = "unknown"
# Failure classifications a probe may report (free text is allowed for rarer
# ones, e.g. "http-404"): what an operator reads in the dashboard.
DEAD = "dead"  # connection refused / reset / DNS failure
TIMEOUT = "timeout"
RATE_LIMITED = "rate-limited"  # HTTP 429 or a JSON-RPC rate-limit error
WRONG_CHAIN = "wrong-chain"  # genesis hash differs from the configured one
BAD_RESPONSE = "bad-response"  # not the JSON-RPC / HTTP / SSE answer expected
ABORTED = "aborted"  # the connection was cut mid-answer
SYNCING = "syncing"  # the node says it is still syncing


@dataclass(frozen=True, slots=True)
class ProbeResult:
    endpoint_id: str
    at: float  # unix time the probe started
    kind: ProbeKind
    classification: str  # LIVE or a failure reason
    latency_ms: int | None = None  # None when it never answered
    best: int | None = None  # node endpoints: best block number
    finalized: int | None = None
    archive: bool | None = None  # full node probes: historical state readable?
    detail: str = ""  # short, secret-free text for operators
    # head node probes: the runtime of the best block (state_getRuntimeVersion);
    # None when the node did not say
    spec_name: str | None = None
    spec_version: int | None = None

    @property
    def ok(self) -> bool:
        return self.classification == LIVE
