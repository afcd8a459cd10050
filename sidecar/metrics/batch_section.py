"""The ``metrics`` section of a usage batch, validated (pure).

The wire form and its rules are ``common.metrics_wire``'s docstring (the
contract with the proxy). ``parse_metrics`` checks a decoded section strictly
and turns it into a ``ProxyMetrics`` of tuples; a broken one raises
``BatchError`` (the whole batch is refused with 400, as for a bad rollup).
Label *values* are only checked for shape here; how many distinct ones are
kept is the accumulator's business (``sidecar.metrics.proxy_counters``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from common.metrics_wire import (
    DURATION_BUCKETS,
    EXTRA_COUNTERS,
    GAUGES,
    MAX_EXTRA_LABELS,
    MAX_LABEL_LEN,
    MAX_ROWS,
    MECHANISM_GAUGES,
    NETWORK_GAUGES,
    OUTCOMES,
    SUBSCRIPTION_GAUGES,
    UPSTREAM_GAUGES,
)
from common.usage_wire import ENDPOINT_ID, MAX_COUNT, BatchError, show

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_N_BUCKETS = len(DURATION_BUCKETS) + 1

Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs


@dataclass(frozen=True, slots=True)
class Gauges:
    ws_connections: int = 0
    spool_batches: int = 0
    client_subscriptions: tuple[tuple[str, int], ...] = ()
    upstream_subscriptions: tuple[tuple[str, int], ...] = ()
    # endpoint id -> n (common.metrics_wire.UPSTREAM_GAUGES)
    upstream_sent_last_s: tuple[tuple[str, int], ...] = ()
    upstream_learned_rps: tuple[tuple[str, int], ...] = ()
    upstream_backoff_s: tuple[tuple[str, int], ...] = ()
    upstream_quarantined: tuple[tuple[str, int], ...] = ()
    upstream_silent: tuple[tuple[str, int], ...] = ()
    upstream_state_lost: tuple[tuple[str, int], ...] = ()
    # mechanism -> 1 (common.metrics_wire.MECHANISM_GAUGES)
    mechanisms_off: tuple[tuple[str, int], ...] = ()
    # network -> n (common.metrics_wire.NETWORK_GAUGES)
    follow_pinned_blocks: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class ProxyMetrics:
    proxy_id: str
    requests: tuple[tuple[str, str, str, int], ...] = ()  # network, method, outcome, n
    duration: tuple[tuple[str, tuple[int, ...], float], ...] = ()  # network, per bucket, sum
    attempts: tuple[tuple[str, str, int], ...] = ()  # endpoint id, result, n
    failovers: tuple[tuple[str, int], ...] = ()  # network, n
    extra: tuple[tuple[str, Labels, int], ...] = ()  # counter name, labels, n
    gauges: Gauges | None = None  # None: the batch carries no snapshot


def _label(value: Any, where: str, what: str) -> str:
    if type(value) is not str or not 0 < len(value) <= MAX_LABEL_LEN or not value.isprintable():
        raise BatchError(
            f"{where} {what} must be a printable string of 1..{MAX_LABEL_LEN} characters,"
            f" got {show(value)}"
        )
    return value


def _count(value: Any, where: str) -> int:
    if type(value) is not int or not 0 <= value <= MAX_COUNT:
        raise BatchError(f"{where} must be an integer 0..{MAX_COUNT}, got {show(value)}")
    return value


def _network(value: Any, where: str, networks: Sequence[str]) -> str:
    if type(value) is not str or value not in networks:
        raise BatchError(
            f"{where} network {show(value)} is not a configured network ({', '.join(networks)})"
        )
    return value


def _rows(doc: dict[str, Any], key: str, width: int) -> list[tuple[str, list[Any]]]:
    """``doc[key]`` as (where, row) pairs; each row a list of ``width`` items."""
    rows = doc.get(key, [])
    if type(rows) is not list:
        raise BatchError(f"metrics.{key} must be a list")
    if len(rows) > MAX_ROWS:
        raise BatchError(f"metrics.{key} has too many rows ({len(rows)} > {MAX_ROWS})")
    out = []
    for i, row in enumerate(rows):
        where = f"metrics.{key}[{i}]"
        if type(row) is not list or len(row) != width:
            raise BatchError(f"{where} must be a list of {width} items")
        out.append((where, row))
    return out


def _duration(
    where: str, row: list[Any], networks: Sequence[str]
) -> tuple[str, tuple[int, ...], float]:
    network, counts, total = row
    if type(counts) is not list or len(counts) != _N_BUCKETS:
        raise BatchError(f"{where} bucket counts must be a list of {_N_BUCKETS} integers")
    if isinstance(total, bool) or not isinstance(total, int | float):
        raise BatchError(f"{where} sum_seconds must be a number, got {show(total)}")
    if not math.isfinite(total) or not 0 <= total <= 1e300:
        raise BatchError(f"{where} sum_seconds must be a finite number >= 0, got {total}")
    return (
        _network(network, where, networks),
        tuple(_count(n, f"{where} bucket {b}") for b, n in enumerate(counts)),
        float(total),
    )


def _extra(where: str, row: list[Any]) -> tuple[str, Labels, int]:
    name, labels, n = row
    if name not in EXTRA_COUNTERS:
        raise BatchError(f"{where} name {show(name)} is not one of {', '.join(EXTRA_COUNTERS)}")
    if type(labels) is not dict or len(labels) > MAX_EXTRA_LABELS:
        raise BatchError(f"{where} labels must be an object of at most {MAX_EXTRA_LABELS} labels")
    for k in labels:
        if type(k) is not str or not _LABEL_NAME.fullmatch(k) or k.startswith("__"):
            raise BatchError(f"{where} label name {show(k)} is not a Prometheus label name")
        _label(labels[k], where, f"label {k}")
    return name, tuple(sorted(labels.items())), _count(n, f"{where} count")


def _endpoint(value: Any, where: str) -> str:
    if type(value) is not str or not ENDPOINT_ID.fullmatch(value):
        raise BatchError(f"{where} endpoint must be an id endpoint-srf-<16 hex>, got {show(value)}")
    return value


def _method(value: Any, where: str) -> str:
    return _label(value, where, "method")


def _mechanism(value: Any, where: str) -> str:
    return _label(value, where, "mechanism")


def _gauge_map(
    doc: dict[str, Any], key: str, what: str, check: Callable[[Any, str], str]
) -> tuple[tuple[str, int], ...]:
    """``doc[key]``, an object ``what`` -> count (each key passed through
    ``check``), as pairs; absent: empty."""
    by_key = doc.get(key, {})
    where = f"metrics.gauges.{key}"
    if type(by_key) is not dict or len(by_key) > MAX_ROWS:
        raise BatchError(f"{where} must be an object of at most {MAX_ROWS} {what} -> count")
    return tuple((check(k, where), _count(n, f"{where}[{k!r}]")) for k, n in by_key.items())


def _gauges(doc: Any) -> Gauges:
    if type(doc) is not dict:
        raise BatchError("metrics.gauges must be an object")
    # the fields by name, as the wire names them (``common.metrics_wire``)
    plain: dict[str, Any] = {k: _count(doc.get(k, 0), f"metrics.gauges.{k}") for k in GAUGES}
    maps: dict[str, Any] = {k: _gauge_map(doc, k, "method", _method) for k in SUBSCRIPTION_GAUGES}
    maps |= {k: _gauge_map(doc, k, "endpoint", _endpoint) for k in UPSTREAM_GAUGES}
    maps |= {k: _gauge_map(doc, k, "mechanism", _mechanism) for k in MECHANISM_GAUGES}
    maps |= {k: _gauge_map(doc, k, "network", _method) for k in NETWORK_GAUGES}
    return Gauges(**plain, **maps)


def parse_metrics(doc: Any, networks: Sequence[str]) -> ProxyMetrics:
    """Validate a decoded ``metrics`` section against ``common.metrics_wire``'s rules."""
    if type(doc) is not dict:
        raise BatchError("metrics must be an object")
    proxy_id = _label(doc.get("proxy_id"), "metrics", "proxy_id")
    requests = []
    for where, (network, method, outcome, n) in _rows(doc, "requests", 4):
        if outcome not in OUTCOMES:
            raise BatchError(f"{where} outcome {show(outcome)} is not one of {', '.join(OUTCOMES)}")
        requests.append(
            (
                _network(network, where, networks),
                _label(method, where, "method"),
                outcome,
                _count(n, f"{where} count"),
            )
        )
    attempts = [
        (_endpoint(endpoint, where), _label(result, where, "result"), _count(n, f"{where} count"))
        for where, (endpoint, result, n) in _rows(doc, "attempts", 3)
    ]
    gauges = doc.get("gauges")
    return ProxyMetrics(
        proxy_id=proxy_id,
        requests=tuple(requests),
        duration=tuple(_duration(w, r, networks) for w, r in _rows(doc, "duration", 3)),
        attempts=tuple(attempts),
        failovers=tuple(
            (_network(r[0], w, networks), _count(r[1], f"{w} count"))
            for w, r in _rows(doc, "failovers", 2)
        ),
        extra=tuple(_extra(w, r) for w, r in _rows(doc, "extra", 3)),
        gauges=None if gauges is None else _gauges(gauges),
    )
