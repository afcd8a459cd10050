"""A usage batch as the sidecar takes it (pure): the wire (``common.usage_wire``:
the envelope and the rollups, checked all or nothing) plus its optional
``metrics`` section, checked by ``sidecar.metrics.batch_section``; the records
of a network it no longer serves are left out first. Whatever reaches the
store is well formed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from common.usage_wire import MAX_COUNT, MAX_ROLLUPS, Rollup, decode_batch
from sidecar.metrics.batch_section import ProxyMetrics, parse_metrics


@dataclass(frozen=True, slots=True)
class Batch:
    batch_id: str  # lowercase hex
    sent_at: float
    rollups: tuple[Rollup, ...]
    metrics: ProxyMetrics | None = None  # the live-metrics section (common.metrics_wire)
    left_out: tuple[str, ...] = ()  # networks not served whose records were left out
    left_out_calls: int = 0  # ... and the calls those records held

    @property
    def records(self) -> int:
        """Calls represented by the batch."""
        return sum(r.requests for r in self.rollups)


def parse_batch(
    doc: Any, networks: Sequence[str], now: float, *, max_rollups: int = MAX_ROLLUPS
) -> Batch:
    """Validate a decoded ``POST /api/v1/internal/usage`` body, all or nothing
    (``BatchError`` names the first problem): the rules of ``common.usage_wire``,
    ``networks`` the config's ``proxy.networks``; then the ``metrics`` section
    (``common.metrics_wire``), when there is one."""
    doc, others = served_only(doc, networks)
    d = decode_batch(doc, networks, now, max_rollups=max_rollups)
    metrics = None if d.metrics is None else parse_metrics(d.metrics, tuple(networks))
    calls = sum(min(n, MAX_COUNT) for r in others if type(n := r.get("requests")) is int and n > 0)
    left_out = tuple(sorted({str(r["network"])[:40] for r in others}))[:10]  # said, bounded
    return Batch(d.batch_id, d.sent_at, d.rollups, metrics, left_out, calls)


# the metrics section's rows whose first item is a network (common.metrics_wire)
_NETWORK_ROWS = ("requests", "duration", "failovers")


def served_only(doc: Any, networks: Sequence[str]) -> tuple[Any, list[dict[str, Any]]]:
    """``doc`` without the rollups and metrics rows of a network this sidecar
    does not serve (a reload took it out while proxies still held its
    records): the batch's other records are taken, not refused with them
    (a refused batch is dropped by its proxy). Anything else is left for the
    checks to judge."""
    if not isinstance(doc, dict):
        return doc, []

    def other(row: Any, network: Any) -> bool:
        return isinstance(network, str) and network not in networks

    out = dict(doc)
    rollups = doc.get("rollups")
    others: list[dict[str, Any]] = []
    if isinstance(rollups, list):
        others = [r for r in rollups if isinstance(r, dict) and other(r, r.get("network"))]
        gone = {id(r) for r in others}
        out["rollups"] = [r for r in rollups if id(r) not in gone]
    metrics = doc.get("metrics")
    if isinstance(metrics, dict):
        metrics = out["metrics"] = dict(metrics)
        for key in _NETWORK_ROWS:
            rows = metrics.get(key)
            if isinstance(rows, list):
                metrics[key] = [
                    r for r in rows if not (isinstance(r, list) and r and other(r, r[0]))
                ]
    return out, others
