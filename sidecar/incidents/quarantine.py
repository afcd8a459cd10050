"""Quarantined nodes as incidents: a node a proxy's cross-check outvoted
(``addon/upstream/cross_check.py``) gets no client traffic from that proxy; the
proxies report it in their usage batches' gauges (``upstream_quarantined``),
and here it becomes an ``answer-mismatch`` incident on the dashboard, closed
once no live proxy reports it any more (it agreed again). The same rule
makes a ``silent`` incident of a node whose subscription socket went silent
(``upstream_silent``, ``addon/subs/silence.py``), closed once it pushes again.

``reconcile_quarantine`` is the pure rule; ``QuarantineWatch`` applies it every
few seconds, a lifecycle of its own (``start`` at the app's start-up, ``stop``
at its clean-up: ``sidecar.server.app``). It reads the tracker, the proxies'
quarantine totals and the registry's endpoints through callables, each time:
the tracker is replaced once the incident store opens, and a reload changes
the endpoints."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Collection, Mapping

from sidecar.incidents.tracker import IncidentTracker

MESSAGE = "answer-mismatch"
SILENT = "silent"


def reconcile_quarantine(
    tracker: IncidentTracker,
    quarantined: Mapping[str, int],
    known: Collection[str],
    now: float,
    message: str = MESSAGE,
) -> None:
    """Open a ``message`` incident for each node (of this registry) the proxies
    report that has none open; close the ``message`` incidents of nodes no
    longer reported. A node already in another incident keeps that one."""
    for eid, proxies in quarantined.items():
        if proxies > 0 and eid in known and tracker.open_incident(eid) is None:
            tracker.open(eid, now, message)
    for inc in tracker.incidents():
        if inc.ongoing and inc.message == message and not quarantined.get(inc.endpoint_id):
            tracker.close(inc.endpoint_id, now)


class QuarantineWatch:
    """Every ``every_s``: the proxies' quarantined nodes (``quarantined()``:
    endpoint id -> proxies reporting it) reconciled with ``tracker()``'s
    incidents, for the endpoints ``known()`` now."""

    def __init__(
        self,
        tracker: Callable[[], IncidentTracker],
        quarantined: Callable[[], Mapping[str, int]],
        known: Callable[[], Collection[str]],
        clock: Callable[[], float],
        *,
        every_s: float = 5.0,
        message: str = MESSAGE,
    ) -> None:
        self._tracker = tracker
        self._quarantined = quarantined
        self._known = known
        self._clock = clock
        self.every_s = every_s
        self.message = message
        self._task: asyncio.Task[None] | None = None

    def tick(self) -> None:
        reconcile_quarantine(
            self._tracker(), self._quarantined(), self._known(), self._clock(), self.message
        )

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.every_s)
            self.tick()

    def start(self) -> None:
        """Start the loop (on the running event loop); once."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run())

    async def stop(self) -> None:
        """Stop the loop and wait until it has stopped."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
