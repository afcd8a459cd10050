"""Per-endpoint health from probe results, with flap damping (pure).

Status is ``Unknown`` until the first probe answers, ``OK`` after it, and
moves OK → Degraded only after ``fail_threshold`` consecutive failed probes,
Degraded → OK only after ``recover_threshold`` consecutive successes. The
transition (if any) is returned with the new state, so incidents can be
opened and closed from the same decision. ``chain_heads``: a network's tip
and finalized height, as its healthy nodes report them. The node's state
horizon rides along (``horizon``), folded apart (``sidecar.probing.horizon``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from common.config import Endpoint
from sidecar.probing.horizon import Horizon
from sidecar.probing.results import NODE_KINDS, UNKNOWN, ProbeResult

Status = Literal["OK", "Degraded", "Unknown"]
Transition = Literal["degraded", "recovered"] | None

_EWMA_ALPHA = 0.3
_WINDOW = 20  # probes remembered for the score


@dataclass(frozen=True, slots=True)
class Health:
    status: Status = "Unknown"
    classification: str = UNKNOWN
    consecutive_failures: int = 0
    consecutive_successes: int = 0
    last_probe_at: float | None = None
    last_ok_at: float | None = None
    latency_ms: float | None = None  # EWMA of successful probes
    best: int | None = None
    finalized: int | None = None
    best_at: float | None = None
    archive: bool | None = None  # last conclusive archive check
    recent: tuple[bool, ...] = field(default=())  # last _WINDOW outcomes, newest last
    message: str = ""  # the failure that made it Degraded
    # how far back its state goes, measured by the full probes' state checks
    # (``sidecar.probing.horizon``; folded by the Prober, not by ``apply``)
    horizon: Horizon = field(default_factory=Horizon)

    @property
    def probed(self) -> bool:
        return self.last_probe_at is not None

    @property
    def healthy(self) -> bool:
        return self.status == "OK"

    @property
    def score(self) -> float:
        """Share of recent probes that succeeded (1.0 before any probe)."""
        if not self.recent:
            return 1.0
        return sum(self.recent) / len(self.recent)


def apply(
    h: Health, r: ProbeResult, *, fail_threshold: int, recover_threshold: int
) -> tuple[Health, Transition]:
    recent = (*h.recent, r.ok)[-_WINDOW:]
    if r.ok:
        latency = h.latency_ms
        if r.latency_ms is not None:
            latency = (
                float(r.latency_ms)
                if latency is None
                else _EWMA_ALPHA * r.latency_ms + (1 - _EWMA_ALPHA) * latency
            )
        successes = h.consecutive_successes + 1
        status: Status = h.status
        transition: Transition = None
        if h.status == "Unknown" or (h.status == "Degraded" and successes >= recover_threshold):
            transition = "recovered" if h.status == "Degraded" else None
            status = "OK"
        new = replace(
            h,
            status=status,
            classification=r.classification,
            consecutive_failures=0,
            consecutive_successes=successes,
            last_probe_at=r.at,
            last_ok_at=r.at,
            latency_ms=latency,
            best=r.best if r.best is not None else h.best,
            finalized=r.finalized if r.finalized is not None else h.finalized,
            best_at=r.at if r.best is not None else h.best_at,
            archive=r.archive if r.archive is not None else h.archive,
            recent=recent,
            message="" if status == "OK" else h.message,
        )
        return new, transition

    failures = h.consecutive_failures + 1
    status = h.status
    transition = None
    if h.status != "Degraded" and failures >= fail_threshold:
        status, transition = "Degraded", "degraded"
    new = replace(
        h,
        status=status,
        classification=r.classification,
        consecutive_failures=failures,
        consecutive_successes=0,
        last_probe_at=r.at,
        recent=recent,
        message=r.classification if transition else h.message,
    )
    return new, transition


def chain_heads(
    endpoints: Iterable[Endpoint], health: Mapping[str, Health]
) -> tuple[int | None, int | None]:
    """(tip, finalized) over the healthy node endpoints given."""
    tip = fin = None
    for e in endpoints:
        h = health.get(e.id)
        if e.kind not in NODE_KINDS or h is None or not h.healthy:
            continue
        if h.best is not None and (tip is None or h.best > tip):
            tip = h.best
        if h.finalized is not None and (fin is None or h.finalized > fin):
            fin = h.finalized
    return tip, fin
