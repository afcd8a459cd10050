"""The wire form of the addon's usage batches and their validation (pure).

The addon pre-aggregates its calls into per-minute rollups keyed by
``(minute, network, endpoint or None, method)`` (``minute = floor(unix_time / 60)``,
``endpoint`` None = answered from the cache) with counts, a latency sum and a
mergeable latency histogram (``common.latency_hist``), and posts them in
batches with an idempotency ``batch_id``. ``parse_batch`` validates a batch
strictly and all-or-nothing: whatever reaches the store is well formed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from common.latency_hist import Hist
from sidecar.usage.stats.checks import MAX_COUNT, BatchError
from sidecar.usage.stats.checks import show as _show
from sidecar.usage.stats.proxy_metrics import ProxyMetrics, parse_metrics

__all__ = [
    "MAX_COUNT",
    "MAX_ROLLUPS",
    "Batch",
    "BatchError",
    "Rollup",
    "parse_batch",
    "parse_rollup",
]

MAX_ROLLUPS = 10_000
FUTURE_TOLERANCE_S = 3600  # a rollup further ahead of the sidecar's clock is refused
MAX_METHOD_LEN = 128
MAX_HIST_BUCKETS = 2000

_BATCH_ID = re.compile(r"[0-9a-fA-F]{32}")
_ENDPOINT_ID = re.compile(r"endpoint-srf-[0-9a-f]{16}")


@dataclass(frozen=True, slots=True)
class Rollup:
    minute: int
    network: str
    endpoint: str | None  # None: answered from the cache
    method: str
    requests: int
    errors: int = 0
    failovers: int = 0
    cache_hits: int = 0
    latency_ms_sum: float = 0.0
    hist: Hist = field(default_factory=dict)

    @property
    def key(self) -> tuple[int, str, str, str]:
        """The storage key; the cache (no endpoint) is ``''``."""
        return (self.minute, self.network, self.endpoint or "", self.method)


@dataclass(frozen=True, slots=True)
class Batch:
    batch_id: str  # lowercase hex
    sent_at: float
    rollups: tuple[Rollup, ...]
    metrics: ProxyMetrics | None = None  # the live-metrics section (common.metrics_wire)

    @property
    def records(self) -> int:
        """Calls represented by the batch."""
        return sum(r.requests for r in self.rollups)


def _int_error(value: Any, where: str, maximum: int) -> BatchError:
    if isinstance(value, bool) or not isinstance(value, int):
        return BatchError(f"{where} must be an integer, got {_show(value)}")
    if value < 0:
        return BatchError(f"{where} must be >= 0, got {value}")
    return BatchError(f"{where} is too large ({value} > {maximum})")


def _num(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BatchError(f"{where} must be a number, got {_show(value)}")
    if not math.isfinite(value) or value < 0:
        raise BatchError(f"{where} must be a finite number >= 0, got {value}")
    return float(value)


def _hist(value: Any, where: Callable[[], str]) -> Hist:
    if type(value) is not dict:
        raise BatchError(f"{where()}.latency_hist must be an object of bucket -> count")
    if len(value) > MAX_HIST_BUCKETS:
        raise BatchError(
            f"{where()}.latency_hist has too many buckets ({len(value)} > {MAX_HIST_BUCKETS})"
        )
    out: Hist = {}
    for k, n in value.items():  # the hot loop of ingest: plain checks, no regex
        b = _bucket(k)
        if b is None:
            raise BatchError(
                f"{where()}.latency_hist has a bad bucket {_show(k)} (integers -1..5000)"
            )
        if type(n) is not int or not 0 <= n <= MAX_COUNT:
            raise _int_error(n, f"{where()}.latency_hist[{k!r}]", MAX_COUNT)
        if n:
            out[b] = out.get(b, 0) + n
    return out


def _bucket(k: Any) -> int | None:
    if type(k) is not str or len(k) > 6 or not k.isascii():
        return None
    if not (k[1:] if k[:1] == "-" else k).isdigit():
        return None
    b = int(k)
    return b if -1 <= b <= 5000 else None


def parse_rollup(doc: Any, where: str, networks: Sequence[str], now: float) -> Rollup:
    """One rollup; ``where`` (e.g. ``rollups[3]``) prefixes the error messages."""
    return _parse_rollup(doc, lambda: where, networks, math.floor((now + FUTURE_TOLERANCE_S) / 60))


def _parse_rollup(
    doc: Any, where: Callable[[], str], networks: Sequence[str], max_minute: int
) -> Rollup:
    # The happy path builds no strings: ``where()`` is only called for a message.
    if type(doc) is not dict:
        raise BatchError(f"{where()} must be an object")
    try:
        minute = doc["minute"]
        network = doc["network"]
        endpoint = doc["endpoint"]
        method = doc["method"]
        requests = doc["requests"]
        errors = doc["errors"]
        failovers = doc["failovers"]
        cache_hits = doc["cache_hits"]
        latency_sum = doc["latency_ms_sum"]
        raw_hist = doc["latency_hist"]
    except KeyError as e:
        raise BatchError(f"{where()}.{e.args[0]} is required") from None
    if type(minute) is not int or not 0 <= minute <= max_minute:
        if type(minute) is int and minute > max_minute:
            raise BatchError(
                f"{where()}.minute {minute} is in the future"
                f" (more than {FUTURE_TOLERANCE_S} s ahead of the sidecar's clock)"
            )
        raise _int_error(minute, f"{where()}.minute", max_minute)
    if type(network) is not str or network not in networks:
        raise BatchError(
            f"{where()}.network {_show(network)} is not a configured network"
            f" ({', '.join(networks)})"
        )
    if endpoint is not None and not (type(endpoint) is str and _ENDPOINT_ID.fullmatch(endpoint)):
        raise BatchError(
            f"{where()}.endpoint must be null or an id endpoint-srf-<16 hex>, got {_show(endpoint)}"
        )
    if type(method) is not str or not 0 < len(method) <= MAX_METHOD_LEN or not method.isprintable():
        raise BatchError(
            f"{where()}.method must be a printable string of 1..{MAX_METHOD_LEN} characters"
        )
    for name, value in (
        ("requests", requests),
        ("errors", errors),
        ("failovers", failovers),
        ("cache_hits", cache_hits),
    ):
        if type(value) is not int or not 0 <= value <= MAX_COUNT:
            raise _int_error(value, f"{where()}.{name}", MAX_COUNT)
        if value > requests:
            raise BatchError(f"{where()}.{name} ({value}) > requests ({requests})")
    if type(latency_sum) is not float or not 0 <= latency_sum <= 1e300:  # also refuses NaN
        latency_sum = _num(latency_sum, f"{where()}.latency_ms_sum")
    hist = _hist(raw_hist, where)
    total = sum(hist.values())
    if total != requests:
        raise BatchError(
            f"{where()}.latency_hist holds {total} latencies but requests is {requests}"
        )
    return Rollup(
        minute, network, endpoint, method, requests, errors, failovers, cache_hits,
        float(latency_sum), hist,
    )  # fmt: skip


def parse_batch(
    doc: Any, networks: Sequence[str], now: float, *, max_rollups: int = MAX_ROLLUPS
) -> Batch:
    """Validate a decoded ``POST /api/v1/internal/usage`` body; all or nothing::

        {"batch_id": "<32 hex>", "sent_at": 1763700000.5,
         "rollups": [{"minute": 29395000, "network": "finney",
                      "endpoint": "endpoint-srf-<16 hex>" or null (answered from the cache),
                      "method": "chain_getHeader", "requests": 10, "errors": 1,
                      "failovers": 2, "cache_hits": 3, "latency_ms_sum": 123.0,
                      "latency_hist": {"195": 4, "230": 6}}]}

    ``minute`` = floor(unix time / 60), at most an hour ahead of ``now``;
    ``network`` one of ``networks``; counts are integers >= 0 with errors,
    failovers and cache_hits <= requests; ``latency_hist`` is
    ``latency_hist.to_wire`` of the calls' latencies and holds exactly
    ``requests`` of them; at most ``max_rollups`` rollups. Unknown keys are
    ignored (the addon may add fields later); ``BatchError`` names the first
    problem. The optional ``metrics`` section (live counters and gauges for
    ``/metrics``, ``common.metrics_wire``) is checked by
    ``sidecar.usage.stats.proxy_metrics.parse_metrics``; a batch with no rollups and
    a metrics section is a proxy's heartbeat.
    """
    if not isinstance(doc, dict):
        raise BatchError("the body must be a JSON object")
    batch_id = doc.get("batch_id")
    if not isinstance(batch_id, str) or not _BATCH_ID.fullmatch(batch_id):
        raise BatchError(f"batch_id must be 32 hex characters, got {_show(batch_id)}")
    if "sent_at" not in doc:
        raise BatchError("sent_at is required")
    sent_at = _num(doc["sent_at"], "sent_at")
    rollups = doc.get("rollups")
    if not isinstance(rollups, list):
        raise BatchError("rollups must be a list")
    if len(rollups) > max_rollups:
        raise BatchError(f"too many rollups in one batch ({len(rollups)} > {max_rollups})")
    nets = tuple(networks)
    max_minute = math.floor((now + FUTURE_TOLERANCE_S) / 60)
    parsed = tuple(
        _parse_rollup(r, lambda i=i: f"rollups[{i}]", nets, max_minute)
        for i, r in enumerate(rollups)
    )
    metrics = doc.get("metrics")
    return Batch(
        batch_id=batch_id.lower(),
        sent_at=sent_at,
        rollups=parsed,
        metrics=None if metrics is None else parse_metrics(metrics, nets),
    )
