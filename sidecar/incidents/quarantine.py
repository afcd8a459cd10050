"""Quarantined nodes as incidents: a node a proxy's cross-check outvoted
(``addon/upstream/cross_check.py``) gets no client traffic from that proxy; the
proxies report it in their usage batches' gauges (``upstream_quarantined``),
and here it becomes an ``answer-mismatch`` incident on the dashboard, closed
once no live proxy reports it any more (it agreed again). Pure: the tracker
and the gauge totals are passed in, called every few seconds by the app."""

from __future__ import annotations

from collections.abc import Mapping

from sidecar.incidents.tracker import IncidentTracker

MESSAGE = "answer-mismatch"


def reconcile_quarantine(
    tracker: IncidentTracker, quarantined: Mapping[str, int], known: set[str], now: float
) -> None:
    """Open an incident for each quarantined node (of this registry) that has
    none open; close the ``answer-mismatch`` incidents of nodes no longer
    quarantined. A node already in a probe incident keeps that one."""
    for eid, proxies in quarantined.items():
        if proxies > 0 and eid in known and tracker.open_incident(eid) is None:
            tracker.open(eid, now, MESSAGE)
    for inc in tracker.incidents():
        if inc.ongoing and inc.message == MESSAGE and not quarantined.get(inc.endpoint_id):
            tracker.close(inc.endpoint_id, now)
