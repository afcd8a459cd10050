"""Usage statistics, the pure part: batch validation, window totals, the summary.

The addon pre-aggregates its calls into per-minute rollups keyed by
``(minute, network, endpoint or None, method)`` (``minute = floor(unix_time / 60)``,
``endpoint`` None = answered from the cache) with counts, a latency sum and a
mergeable latency histogram (``chainproxy.latency_hist``), and posts them in
batches with an idempotency ``batch_id``. ``parse_batch`` validates a batch
strictly and all-or-nothing; the store (``sidecar.usage_store``) merges the
rollups; ``summarize`` turns the 7-day window totals into the public
``GET /api/v1/usage`` document.

Definitions used by the summary:

* **Window**: the last 7 days (604800 s): rollups with
  ``minute >= floor((now - 604800) / 60)``. Only the networks of
  ``proxy.networks`` count (a network removed from the config drops out).
* **success** = requests - errors; every ``pct`` is ``count / requests * 100``
  rounded to 2 decimals, 0 when there are no requests.
* **p50_ms / p95_ms**: integer ms read from the merged histograms of the window
  (~1 % relative error), null when there are no requests.
* **endpoints**: one row per upstream endpoint id with requests in the window
  (cache hits have no endpoint and make no row), ordered by requests
  descending then label. ``share_pct`` = its requests / all endpoint requests
  in scope; ``errors_pct`` = its errors / its requests; ``avg_latency_ms`` =
  its latency sum / its requests, rounded.
* **endpoint label**: ``<provider>-<network>-rpc``, or ``<provider>-archive-rpc``
  for an archive endpoint. Labels are assigned over the config's ``node-rpc``
  endpoints plus any other id seen in the window (an id no longer in the
  config has provider ``unknown``), in id order: the first keeps the plain
  label, the next ones get ``-2``, ``-3`` … So a label does not depend on the
  ``?network=`` filter or on which endpoints happen to have traffic.
* **updated**: the time of the last successful (non-duplicate) ingest, UTC
  ISO-8601 ``…Z``; null when nothing was ever ingested. An empty batch counts,
  so the addon can use one as a heartbeat when it has no traffic.
* **freshness**: ``"fresh"`` when ``updated`` is at most 10 minutes (600 s)
  old, else ``"unknown"`` (including when ``updated`` is null): the numbers
  may then miss recent traffic because the addon could not deliver it yet.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from chainproxy.config import Endpoint
from chainproxy.latency_hist import Hist, merge_into, quantile

WINDOW_S = 604_800
FRESH_S = 600
MAX_ROLLUPS = 10_000
FUTURE_TOLERANCE_S = 3600  # a rollup further ahead of the sidecar's clock is refused
MAX_COUNT = 10**12  # per rollup field; keeps every SQLite sum far from 2**63
MAX_METHOD_LEN = 128
MAX_HIST_BUCKETS = 2000
UNKNOWN_PROVIDER = "unknown"

_BATCH_ID = re.compile(r"[0-9a-fA-F]{32}")
_ENDPOINT_ID = re.compile(r"endpoint-srf-[0-9a-f]{16}")
_COUNT_FIELDS = ("requests", "errors", "failovers", "cache_hits")
_REQUIRED = (
    "minute",
    "network",
    "endpoint",
    "method",
    *_COUNT_FIELDS,
    "latency_ms_sum",
    "latency_hist",
)


class BatchError(ValueError):
    """A batch that must be refused whole; ``str()`` names what is wrong."""


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

    @property
    def records(self) -> int:
        """Calls represented by the batch."""
        return sum(r.requests for r in self.rollups)


def window_start_minute(now: float, window_s: int = WINDOW_S) -> int:
    """The first minute inside the window ending at ``now``."""
    return math.floor((now - window_s) / 60)


# --- validation ----------------------------------------------------------------------------


def _int(value: Any, where: str, *, maximum: int = MAX_COUNT) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise BatchError(f"{where} must be an integer, got {_show(value)}")
    if value < 0:
        raise BatchError(f"{where} must be >= 0, got {value}")
    if value > maximum:
        raise BatchError(f"{where} is too large ({value} > {maximum})")
    return value


def _num(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BatchError(f"{where} must be a number, got {_show(value)}")
    if not math.isfinite(value) or value < 0:
        raise BatchError(f"{where} must be a finite number >= 0, got {value}")
    return float(value)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _hist(value: Any, where: str) -> Hist:
    if not isinstance(value, dict):
        raise BatchError(f"{where} must be an object of bucket -> count")
    if len(value) > MAX_HIST_BUCKETS:
        raise BatchError(f"{where} has too many buckets ({len(value)} > {MAX_HIST_BUCKETS})")
    out: Hist = {}
    for k, n in value.items():  # the hot loop of ingest: plain checks, no regex
        b = _bucket(k)
        if b is None:
            raise BatchError(f"{where} has a bad bucket {_show(k)} (integers -1..5000)")
        if type(n) is not int or not 0 <= n <= MAX_COUNT:
            raise BatchError(f"{where}[{k!r}] must be an integer 0..{MAX_COUNT}, got {_show(n)}")
        if n:
            out[b] = out.get(b, 0) + n
    return out


def _bucket(k: Any) -> int | None:
    if not isinstance(k, str) or not k.isascii() or len(k) > 6:
        return None
    if not (k[1:] if k[:1] == "-" else k).isdigit():
        return None
    b = int(k)
    return b if -1 <= b <= 5000 else None


def parse_rollup(doc: Any, where: str, networks: Iterable[str], now: float) -> Rollup:
    if not isinstance(doc, dict):
        raise BatchError(f"{where} must be an object")
    for name in _REQUIRED:
        if name not in doc:
            raise BatchError(f"{where}.{name} is required")
    max_minute = math.floor((now + FUTURE_TOLERANCE_S) / 60)
    minute = _int(doc["minute"], f"{where}.minute", maximum=10**10)
    if minute > max_minute:
        raise BatchError(
            f"{where}.minute {minute} is in the future (now is minute {math.floor(now / 60)})"
        )
    network = doc["network"]
    if not isinstance(network, str) or network not in networks:
        raise BatchError(
            f"{where}.network {_show(network)} is not a configured network ({', '.join(networks)})"
        )
    endpoint = doc["endpoint"]
    if endpoint is not None and not (
        isinstance(endpoint, str) and _ENDPOINT_ID.fullmatch(endpoint)
    ):
        raise BatchError(
            f"{where}.endpoint must be null or an id endpoint-srf-<16 hex>, got {_show(endpoint)}"
        )
    method = doc["method"]
    if (
        not isinstance(method, str)
        or not 0 < len(method) <= MAX_METHOD_LEN
        or not method.isprintable()
    ):
        raise BatchError(
            f"{where}.method must be a printable string of 1..{MAX_METHOD_LEN} characters"
        )
    counts = {name: _int(doc[name], f"{where}.{name}") for name in _COUNT_FIELDS}
    requests = counts["requests"]
    for name in ("errors", "failovers", "cache_hits"):
        if counts[name] > requests:
            raise BatchError(f"{where}.{name} ({counts[name]}) > requests ({requests})")
    latency_sum = _num(doc["latency_ms_sum"], f"{where}.latency_ms_sum")
    hist = _hist(doc["latency_hist"], f"{where}.latency_hist")
    total = sum(hist.values())
    if total != requests:
        raise BatchError(f"{where}.latency_hist holds {total} latencies but requests is {requests}")
    return Rollup(
        minute=minute,
        network=network,
        endpoint=endpoint,
        method=method,
        requests=requests,
        errors=counts["errors"],
        failovers=counts["failovers"],
        cache_hits=counts["cache_hits"],
        latency_ms_sum=latency_sum,
        hist=hist,
    )


def parse_batch(
    doc: Any, networks: Sequence[str], now: float, *, max_rollups: int = MAX_ROLLUPS
) -> Batch:
    """Validate a decoded ``POST /api/v1/internal/usage`` body; all or nothing.

    Unknown keys are ignored (the addon may add fields later); every known
    field is type- and range-checked and ``BatchError`` names the first problem.
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
    parsed = tuple(parse_rollup(r, f"rollups[{i}]", nets, now) for i, r in enumerate(rollups))
    return Batch(batch_id=batch_id.lower(), sent_at=sent_at, rollups=parsed)


# --- window totals -------------------------------------------------------------------------


@dataclass(slots=True)
class Counts:
    requests: int = 0
    errors: int = 0
    failovers: int = 0
    cache_hits: int = 0
    latency_ms_sum: float = 0.0

    def add(self, other: Counts | Rollup) -> None:
        self.requests += other.requests
        self.errors += other.errors
        self.failovers += other.failovers
        self.cache_hits += other.cache_hits
        self.latency_ms_sum += other.latency_ms_sum


@dataclass(slots=True)
class WindowTotals:
    """What the summary needs, for every network: counts per (network, endpoint
    or ``''`` for the cache) and one merged latency histogram per network."""

    counts: dict[tuple[str, str], Counts] = field(default_factory=dict)
    hists: dict[str, Hist] = field(default_factory=dict)

    def add_counts(self, network: str, endpoint: str, c: Counts | Rollup) -> None:
        self.counts.setdefault((network, endpoint), Counts()).add(c)

    def add_hist(self, network: str, hist: Mapping[int, int]) -> None:
        merge_into(self.hists.setdefault(network, {}), hist)


def totals_of(rollups: Iterable[Rollup], now: float, window_s: int = WINDOW_S) -> WindowTotals:
    """The window totals computed naively from raw rollups (the reference the
    pre-aggregating store is checked against, and an in-memory backend)."""
    start = window_start_minute(now, window_s)
    out = WindowTotals()
    for r in rollups:
        if r.minute >= start:
            out.add_counts(r.network, r.endpoint or "", r)
            out.add_hist(r.network, r.hist)
    return out


# --- the summary ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EndpointInfo:
    id: str
    provider: str
    network: str
    archive: bool = False

    @property
    def base_label(self) -> str:
        return f"{self.provider}-{'archive' if self.archive else self.network}-rpc"


def endpoint_labels(infos: Iterable[EndpointInfo]) -> dict[str, str]:
    """id -> label ``<provider>-<network or archive>-rpc``, unique: in id order the
    first endpoint of a label keeps it, the next get ``-2``, ``-3`` …"""
    by_id = {i.id: i for i in infos}
    taken: set[str] = set()
    used: dict[str, int] = {}
    out: dict[str, str] = {}
    for eid in sorted(by_id):
        base = by_id[eid].base_label
        n = used.get(base, 0) + 1
        label = base if n == 1 else f"{base}-{n}"
        while label in taken:  # only if some provider name mimics a suffix
            n += 1
            label = f"{base}-{n}"
        used[base] = n
        taken.add(label)
        out[eid] = label
    return out


def pct(count: float, total: float) -> float:
    """``count / total`` in percent, 2 decimals; 0 for an empty total."""
    return round(count / total * 100, 2) if total else 0.0


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def freshness(updated: float | None, now: float, fresh_s: float = FRESH_S) -> str:
    return "fresh" if updated is not None and now - updated <= fresh_s else "unknown"


def _ms(value: float | None) -> int | None:
    return None if value is None else round(value)


def summarize(
    totals: WindowTotals,
    *,
    networks: Sequence[str],
    endpoints: Iterable[Endpoint],
    network: str | None = None,
    updated: float | None,
    now: float,
    window_s: int = WINDOW_S,
) -> dict[str, Any]:
    """The ``GET /api/v1/usage`` document (see the module docstring).

    ``networks`` are the configured networks (``by_network`` lists each of
    them); ``network`` narrows everything but ``by_network`` to one of them.
    """
    scope = (network,) if network is not None else tuple(networks)
    by_network = {n: 0 for n in networks}
    total = Counts()
    per_endpoint: dict[str, Counts] = {}
    seen_net: dict[str, str] = {}
    for (net, eid), c in totals.counts.items():
        if net not in by_network:
            continue
        by_network[net] += c.requests
        if eid:
            seen_net.setdefault(eid, net)
        if net not in scope:
            continue
        total.add(c)
        if eid and c.requests:
            per_endpoint.setdefault(eid, Counts()).add(c)

    hist: Hist = {}
    for net in scope:
        merge_into(hist, totals.hists.get(net, {}))

    config_by_id = {e.id: e for e in endpoints}
    infos = {
        e.id: EndpointInfo(e.id, e.provider, e.network, e.archive)
        for e in config_by_id.values()
        if e.kind == "node-rpc"
    }
    for eid, net in seen_net.items():
        if eid not in infos:
            e = config_by_id.get(eid)
            infos[eid] = (
                EndpointInfo(eid, e.provider, e.network, e.archive)
                if e is not None
                else EndpointInfo(eid, UNKNOWN_PROVIDER, net)
            )
    labels = endpoint_labels(infos.values())

    endpoint_requests = sum(c.requests for c in per_endpoint.values())
    rows = [
        {
            "endpoint": labels[eid],
            "id": eid,
            "provider": infos[eid].provider,
            "requests": c.requests,
            "share_pct": pct(c.requests, endpoint_requests),
            "errors_pct": pct(c.errors, c.requests),
            "avg_latency_ms": round(c.latency_ms_sum / c.requests),
        }
        for eid, c in per_endpoint.items()
    ]
    rows.sort(key=lambda r: (-r["requests"], r["endpoint"]))

    n = total.requests
    return {
        "window_s": window_s,
        "requests": n,
        "p50_ms": _ms(quantile(hist, 0.5)) if n else None,
        "p95_ms": _ms(quantile(hist, 0.95)) if n else None,
        "success": {"count": n - total.errors, "pct": pct(n - total.errors, n)},
        "errors": {"count": total.errors, "pct": pct(total.errors, n)},
        "failover": {"count": total.failovers, "pct": pct(total.failovers, n)},
        "cache_hits": {"count": total.cache_hits, "pct": pct(total.cache_hits, n)},
        "by_network": by_network,
        "endpoints": rows,
        "updated": iso(updated),
        "freshness": freshness(updated, now),
    }
