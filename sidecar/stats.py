"""Usage statistics, the pure part: batch validation, window totals, the summary.

The addon pre-aggregates its calls into per-minute rollups keyed by
``(minute, network, endpoint or None, method)`` (``minute = floor(unix_time / 60)``,
``endpoint`` None = answered from the cache) with counts, a latency sum and a
mergeable latency histogram (``common.latency_hist``), and posts them in
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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from common.config import Endpoint
from common.latency_hist import Hist, merge_into, quantile
from sidecar.jsonfmt import iso, pct

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


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


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
    problem.
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

    def subtract(self, other: WindowTotals) -> None:
        """Remove ``other`` (data leaving the window); empty entries are dropped."""
        for key, c in other.counts.items():
            mine = self.counts.get(key)
            if mine is None:
                continue
            mine.requests -= c.requests
            mine.errors -= c.errors
            mine.failovers -= c.failovers
            mine.cache_hits -= c.cache_hits
            mine.latency_ms_sum = max(0.0, mine.latency_ms_sum - c.latency_ms_sum)
            if mine.requests <= 0:
                del self.counts[key]
        for net, hist in other.hists.items():
            mine_h = self.hists.get(net)
            if mine_h is None:
                continue
            for b, n in hist.items():
                left = mine_h.get(b, 0) - n
                if left > 0:
                    mine_h[b] = left
                else:
                    mine_h.pop(b, None)

    def copy(self) -> WindowTotals:
        return WindowTotals(
            {
                k: Counts(c.requests, c.errors, c.failovers, c.cache_hits, c.latency_ms_sum)
                for k, c in self.counts.items()
            },
            {net: dict(h) for net, h in self.hists.items()},
        )


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
