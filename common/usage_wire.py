"""The usage batch: the contract between the proxy, which counts its calls
per minute and ships them (``addon/reporting/usage.py``), and the sidecar,
which validates, stores and serves them (``sidecar.usage``). Both sides
import the wire from here: the field names, the encoders the proxy uses and
the decoder the sidecar checks a batch with. The live-metrics section a batch
may carry is ``common.metrics_wire``'s.

``POST /api/v1/internal/usage`` (bearer token), a JSON body::

    {"batch_id": "<32 hex>", "sent_at": 1763700000.5,
     "rollups": [{"minute": 29395000, "network": "finney",
                  "endpoint": "endpoint-srf-<16 hex>" or null (answered from the cache),
                  "method": "chain_getHeader", "requests": 10, "errors": 1,
                  "failovers": 2, "cache_hits": 3, "latency_ms_sum": 123.0,
                  "latency_hist": {"195": 4, "230": 6}, "units": 12}],
     "metrics": {...}}

A rollup is the proxy's calls of one ``(minute, network, endpoint or None,
method)`` (``minute = floor(unix_time / 60)``) with counts, a latency sum and
a mergeable latency histogram (``common.latency_hist``). The rules the
sidecar checks, all or nothing (``BatchError`` names the first problem, the
batch is refused whole with a 400):

* ``batch_id``: 32 hex characters, unique per batch (``uuid4().hex``): a batch
  delivered again (from the spool, after a lost answer) is counted once;
* ``sent_at``: unix time the batch was built, a finite number >= 0;
* at most ``MAX_ROLLUPS`` rollups; ``minute`` at most ``FUTURE_TOLERANCE_S``
  ahead of the sidecar's clock; ``network`` one of the sidecar's
  ``proxy.networks``; ``method`` printable, 1..``MAX_METHOD_LEN`` characters;
  counts are integers 0..``MAX_COUNT`` with errors, failovers and cache_hits
  <= requests; ``latency_hist`` is ``latency_hist.to_wire`` of the calls'
  latencies (at most ``MAX_HIST_BUCKETS`` buckets) and holds exactly
  ``requests`` of them; ``units`` (optional, 0 when absent: a proxy older
  than the field) the quota units the calls were charged, 0..``MAX_COUNT``
  (a rollup of ``requests`` 0 carries units charged after its calls were
  recorded: a long operation's later pages; only its method's units count it);
* ``metrics`` (optional): ``common.metrics_wire``; a batch with no rollups and
  a metrics section is a proxy's heartbeat.

Version: the wire carries none. It changes by addition only: the sidecar
ignores keys it does not know (a newer proxy may send more), and a key is
never removed nor given another meaning.
"""

from __future__ import annotations

import functools
import math
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from common import latency_hist
from common.latency_hist import Hist

MAX_ROLLUPS = 10_000
MAX_COUNT = 10**12  # per count on the wire; keeps every SQLite sum far from 2**63
FUTURE_TOLERANCE_S = 3600  # a rollup further ahead of the sidecar's clock is refused
MAX_METHOD_LEN = 128
MAX_HIST_BUCKETS = 2000
COUNTS = ("requests", "errors", "failovers", "cache_hits")  # a rollup's counts, in order

BATCH_ID = re.compile(r"[0-9a-fA-F]{32}")
ENDPOINT_ID = re.compile(r"endpoint-srf-[0-9a-f]{16}")


class BatchError(ValueError):
    """A batch that must be refused whole; ``str()`` names what is wrong."""


def show(value: Any) -> str:
    """``repr(value)`` cut to 40 characters: a message never echoes a huge value."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


# ---- the counts of a rollup ------------------------------------------------------------------


@dataclass(slots=True)
class Counts:
    """A rollup's counts and latency sum, as both sides add them up."""

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


@dataclass(frozen=True, slots=True)
class Rollup:
    """One rollup as the sidecar decoded it."""

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
    units: int = 0

    @property
    def key(self) -> tuple[int, str, str, str]:
        """The storage key; the cache (no endpoint) is ``''``."""
        return (self.minute, self.network, self.endpoint or "", self.method)


# ---- encoding: the proxy's side ------------------------------------------------------------


def rollup_doc(
    minute: int,
    network: str,
    endpoint: str | None,
    method: str,
    counts: Counts,
    hist: Mapping[int, int],
    units: int = 0,
) -> dict[str, Any]:
    """One rollup on the wire (``units``: the quota units its calls were charged)."""
    return {
        "minute": minute,
        "network": network,
        "endpoint": endpoint,
        "method": method,
        "requests": counts.requests,
        "errors": counts.errors,
        "failovers": counts.failovers,
        "cache_hits": counts.cache_hits,
        "latency_ms_sum": round(counts.latency_ms_sum, 3),
        "latency_hist": latency_hist.to_wire(hist),
        "units": units,
    }


def new_batch(
    rollups: list[dict[str, Any]], now: float, metrics: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A batch of ``rollups`` (``rollup_doc``) with a new id, and the live
    counters and gauges (``common.metrics_wire``) when given."""
    batch: dict[str, Any] = {"batch_id": uuid.uuid4().hex, "sent_at": now, "rollups": rollups}
    if metrics is not None:
        batch["metrics"] = metrics
    return batch


def calls_in(batch: Mapping[str, Any]) -> int:
    """The calls a batch counts (for the log lines of a dropped batch)."""
    return sum(r.get("requests", 0) for r in batch.get("rollups", ()))


# ---- decoding: the sidecar's side ----------------------------------------------------------


def _int_error(value: Any, where: str, maximum: int) -> BatchError:
    if isinstance(value, bool) or not isinstance(value, int):
        return BatchError(f"{where} must be an integer, got {show(value)}")
    if value < 0:
        return BatchError(f"{where} must be >= 0, got {value}")
    return BatchError(f"{where} is too large ({value} > {maximum})")


def _num(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BatchError(f"{where} must be a number, got {show(value)}")
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
                f"{where()}.latency_hist has a bad bucket {show(k)} (integers -1..5000)"
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
            f"{where()}.network {show(network)} is not a configured network ({', '.join(networks)})"
        )
    if endpoint is not None and not (type(endpoint) is str and ENDPOINT_ID.fullmatch(endpoint)):
        raise BatchError(
            f"{where()}.endpoint must be null or an id endpoint-srf-<16 hex>, got {show(endpoint)}"
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
    units = doc.get("units", 0)
    if type(units) is not int or not 0 <= units <= MAX_COUNT:
        raise _int_error(units, f"{where()}.units", MAX_COUNT)
    return Rollup(
        minute, network, endpoint, method, requests, errors, failovers, cache_hits,
        float(latency_sum), hist, units,
    )  # fmt: skip


class Decoded(NamedTuple):
    """A batch's envelope and rollups, checked; its ``metrics`` section as sent
    (None: absent), for the receiver to check (``common.metrics_wire``)."""

    batch_id: str  # lowercase hex
    sent_at: float
    rollups: tuple[Rollup, ...]
    metrics: Any


def decode_batch(
    doc: Any, networks: Sequence[str], now: float, *, max_rollups: int = MAX_ROLLUPS
) -> Decoded:
    """Check a decoded ``POST /api/v1/internal/usage`` body against the rules of
    this module's docstring (``BatchError`` on the first problem); ``networks``
    are the sidecar's ``proxy.networks``, ``now`` its clock."""
    if not isinstance(doc, dict):
        raise BatchError("the body must be a JSON object")
    batch_id = doc.get("batch_id")
    if not isinstance(batch_id, str) or not BATCH_ID.fullmatch(batch_id):
        raise BatchError(f"batch_id must be 32 hex characters, got {show(batch_id)}")
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
        _parse_rollup(r, functools.partial("rollups[{}]".format, i), nets, max_minute)
        for i, r in enumerate(rollups)
    )
    return Decoded(batch_id.lower(), sent_at, parsed, doc.get("metrics"))
