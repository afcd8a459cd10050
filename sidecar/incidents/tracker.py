"""Incidents: when an endpoint was failing, from the Prober's health transitions (pure).

* **Open**: on the Prober's ``"degraded"`` transition, i.e. when an endpoint
  crosses ``probe.fail_threshold`` consecutive failed probes. ``started`` is
  the time of the probe that crossed the threshold; ``message`` is that
  probe's failure classification (``dead``, ``timeout``, ``http-503`` …).
  At most one incident per endpoint is open at a time.
* **Close**: on the ``"recovered"`` transition (``probe.recover_threshold``
  consecutive successes); ``ended`` is the time of that probe. Flapping below
  the thresholds never opens or closes anything: damping is ``health.apply``'s.
* **Severity**: ``"Degraded"``; ``"Down"`` once it has been failing for
  ``DOWN_AFTER_S`` (10 minutes) or longer (for a resolved incident: it lasted
  that long). Computed from the times, never stored.
* **Duration**: ``ended`` (or now, while ongoing) - ``started``, shown as
  hours and minutes: ``"2h 05m"`` (minutes rounded down; ``"26h 10m"`` past a day).
* **Restart** (``reconcile``): an incident open at shutdown stays open unless
  the restored health says otherwise: health ``OK`` closes it (at the
  endpoint's ``last_ok_at``), health ``Unknown`` (no usable health row) closes
  it at ``now`` (the Prober cannot report a recovery from Unknown; a failing
  endpoint reopens one after ``fail_threshold`` probes), an endpoint no longer
  in the registry closes it at ``now``. A ``Degraded`` endpoint with no open
  incident (state from before incidents were kept, or a lost write) gets one,
  ``started`` at its last probe.
* **Retention**: resolved incidents older than ``retention_s`` (30 days) are
  dropped, and beyond ``max_rows`` (10 000) the oldest resolved ones; ongoing
  incidents are never dropped.

``IncidentTracker`` holds the incidents in memory and writes every change
through an optional ``IncidentSink`` (``sidecar.incidents.store.IncidentStore``);
a failed write is kept and retried with the next change or ``flush()``, and
never raised into the probe loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal, Protocol

from common.config import Endpoint
from sidecar.probing.health import Health, Transition
from sidecar.probing.results import ProbeResult

log = logging.getLogger("chainproxy.sidecar.incidents")

Severity = Literal["Degraded", "Down"]

DOWN_AFTER_S = 600.0
RETENTION_S = 30 * 86400.0
MAX_ROWS = 10_000


@dataclass(frozen=True, slots=True)
class Incident:
    id: int
    endpoint_id: str
    started: float  # unix time
    message: str  # the failure classification that opened it
    ended: float | None = None  # None while ongoing

    @property
    def ongoing(self) -> bool:
        return self.ended is None

    @property
    def state(self) -> Literal["ongoing", "resolved"]:
        return "ongoing" if self.ended is None else "resolved"

    def duration_s(self, now: float) -> float:
        end = self.ended if self.ended is not None else now
        return max(0.0, end - self.started)

    def severity(self, now: float) -> Severity:
        return "Down" if self.duration_s(now) >= DOWN_AFTER_S else "Degraded"

    def overlaps(self, since: float) -> bool:
        """Was it ongoing at some moment at or after ``since``?"""
        return self.ended is None or self.ended >= since


def format_duration(seconds: float) -> str:
    """Hours and minutes, minutes rounded down: 7500 s → ``"2h 05m"``."""
    minutes = int(max(0.0, seconds) // 60)
    return f"{minutes // 60}h {minutes % 60:02d}m"


class IncidentSink(Protocol):
    """Where incidents are persisted (``sidecar.incidents.store.IncidentStore``)."""

    def load(self) -> list[Incident]: ...

    def save(self, incidents: Iterable[Incident]) -> None: ...  # upsert by id; may raise

    def delete(self, ids: Iterable[int]) -> None: ...  # may raise


class IncidentTracker:
    def __init__(
        self,
        sink: IncidentSink | None = None,
        *,
        clock: Callable[[], float],
        retention_s: float = RETENTION_S,
        max_rows: int = MAX_ROWS,
    ) -> None:
        self._sink = sink
        self._clock = clock
        self.retention_s = retention_s
        self.max_rows = max_rows
        self._by_id: dict[int, Incident] = {}
        self._open: dict[str, int] = {}  # endpoint id -> id of its open incident
        self._dirty: dict[int, Incident] = {}
        self._deleted: set[int] = set()
        self.write_errors = 0
        if sink is not None:
            for inc in sorted(sink.load(), key=lambda i: i.id):
                older = self.open_incident(inc.endpoint_id)
                if older is not None and inc.ended is None:  # never two open: keep the newer
                    self._dirty[older.id] = replace(older, ended=max(inc.started, older.started))
                    self._put(self._dirty[older.id])
                self._put(inc)
        self._next_id = max(self._by_id, default=0) + 1
        self.prune(clock())
        self.flush()

    # --- reading ------------------------------------------------------------------------

    def incidents(self) -> list[Incident]:
        """All retained incidents, newest first (``started``, then id, descending)."""
        return sorted(self._by_id.values(), key=lambda i: (i.started, i.id), reverse=True)

    def for_endpoint(self, endpoint_id: str) -> list[Incident]:
        return [i for i in self.incidents() if i.endpoint_id == endpoint_id]

    def open_incident(self, endpoint_id: str) -> Incident | None:
        iid = self._open.get(endpoint_id)
        return self._by_id[iid] if iid is not None else None

    def __len__(self) -> int:
        return len(self._by_id)

    # --- changing -----------------------------------------------------------------------

    def on_transition(
        self, endpoint: Endpoint, health: Health, transition: Transition, result: ProbeResult
    ) -> None:
        """The Prober's ``on_transition`` hook."""
        if transition == "degraded":
            self.open(endpoint.id, result.at, result.classification or health.message)
        elif transition == "recovered":
            self.close(endpoint.id, result.at)

    def open(self, endpoint_id: str, at: float, message: str) -> Incident | None:
        """Open an incident; None (and nothing changes) when one is already open."""
        if endpoint_id in self._open:
            return None
        inc = Incident(self._next_id, endpoint_id, at, message[:200])
        self._next_id += 1
        self._put(inc)
        self._dirty[inc.id] = inc
        self.prune(self._clock())
        self.flush()
        return inc

    def close(self, endpoint_id: str, at: float) -> Incident | None:
        """Close the endpoint's open incident (None when there is none)."""
        iid = self._open.get(endpoint_id)
        if iid is None:
            return None
        inc = self._by_id[iid]
        inc = replace(inc, ended=max(at, inc.started))
        self._put(inc)
        self._dirty[inc.id] = inc
        self.flush()
        return inc

    def reconcile(
        self, health: Mapping[str, Health], endpoint_ids: Iterable[str], now: float
    ) -> None:
        """Make the open incidents agree with the health restored at start-up
        (rules in the module docstring)."""
        known = set(endpoint_ids)
        for eid in list(self._open):
            h = health.get(eid)
            if eid not in known or h is None or h.status == "Unknown":
                self.close(eid, now)
            elif h.status == "OK":
                self.close(eid, h.last_ok_at if h.last_ok_at is not None else now)
        for eid in sorted(known):
            h = health.get(eid)
            if h is not None and h.status == "Degraded" and eid not in self._open:
                at = h.last_probe_at if h.last_probe_at is not None else now
                self.open(eid, at, h.message or h.classification)

    def prune(self, now: float) -> int:
        """Drop resolved incidents past the retention age or beyond ``max_rows``."""
        cutoff = now - self.retention_s
        resolved = sorted(
            (i for i in self._by_id.values() if i.ended is not None),
            key=lambda i: (i.started, i.id),
        )
        drop = [i for i in resolved if i.ended is not None and i.ended < cutoff]
        over = len(self._by_id) - len(drop) - self.max_rows
        if over > 0:
            dropped = {i.id for i in drop}
            drop += [i for i in resolved if i.id not in dropped][:over]
        for inc in drop:
            del self._by_id[inc.id]
            self._dirty.pop(inc.id, None)
            self._deleted.add(inc.id)
        return len(drop)

    def flush(self) -> bool:
        """Write pending changes; False (kept for the next try) when the sink fails."""
        if self._sink is None:
            self._dirty.clear()
            self._deleted.clear()
            return True
        if not (self._dirty or self._deleted):
            return True
        try:
            if self._deleted:
                self._sink.delete(sorted(self._deleted))
                self._deleted.clear()
            if self._dirty:
                self._sink.save(list(self._dirty.values()))
                self._dirty.clear()
        except Exception as e:  # a storage failure must never reach the probe loop
            self.write_errors += 1
            log.error("incident store write failed (%s): %s", type(e).__name__, e)
            return False
        return True

    def _put(self, inc: Incident) -> None:
        self._by_id[inc.id] = inc
        if inc.ended is None:
            self._open[inc.endpoint_id] = inc.id
        elif self._open.get(inc.endpoint_id) == inc.id:
            del self._open[inc.endpoint_id]


def recent(incidents: Sequence[Incident], since: float) -> list[Incident]:
    """Those ongoing at some moment at or after ``since``, order kept."""
    return [i for i in incidents if i.overlaps(since)]
