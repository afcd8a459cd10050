"""A node a proxy's cross-check quarantined is an answer-mismatch incident
while any live proxy reports it, closed once none does; a node already in a
probe incident keeps that one; unknown ids are ignored; the watch applies the
rule every few seconds to the registry as it is then."""

from __future__ import annotations

import asyncio

from sidecar.incidents.quarantine import MESSAGE, SILENT, QuarantineWatch, reconcile_quarantine
from sidecar.incidents.tracker import IncidentTracker
from tests.fakes import FakeClock

A, B = "endpoint-srf-00000000000000aa", "endpoint-srf-00000000000000bb"


def test_quarantine_opens_and_agreement_closes_an_incident() -> None:
    clock = FakeClock()
    tracker = IncidentTracker(None, clock=clock)
    reconcile_quarantine(tracker, {A: 1}, {A, B}, clock.t)
    inc = tracker.open_incident(A)
    assert inc is not None and inc.message == MESSAGE and inc.ongoing
    reconcile_quarantine(tracker, {A: 2}, {A, B}, clock.advance(5))  # still: one incident
    assert len(tracker.for_endpoint(A)) == 1
    reconcile_quarantine(tracker, {}, {A, B}, clock.advance(5))
    assert tracker.open_incident(A) is None
    assert tracker.for_endpoint(A)[0].ended == clock.t


def test_a_probe_incident_is_left_alone_and_unknown_ids_ignored() -> None:
    clock = FakeClock()
    tracker = IncidentTracker(None, clock=clock)
    tracker.open(B, clock.t, "timeout")
    reconcile_quarantine(tracker, {B: 1, "endpoint-srf-00000000000000cc": 1}, {A, B}, clock.t)
    reconcile_quarantine(tracker, {}, {A, B}, clock.advance(5))
    open_b = tracker.open_incident(B)
    assert open_b is not None and open_b.message == "timeout"  # the probes close it, not us
    assert len(tracker) == 1


async def test_the_watch_reads_the_registry_at_each_round_and_stops() -> None:
    # A reload changes the registry's endpoints: the watch follows (it read
    # them once, at start, before: a node added later was never opened).
    clock = FakeClock()
    tracker = IncidentTracker(None, clock=clock)
    known = {A}
    watch = QuarantineWatch(lambda: tracker, lambda: {A: 1, B: 1}, lambda: known, clock, every_s=0)
    watch.tick()
    assert tracker.open_incident(A) is not None and tracker.open_incident(B) is None
    known = {A, B}
    watch.start()
    for _ in range(20):
        await asyncio.sleep(0)
        if tracker.open_incident(B) is not None:
            break
    await watch.stop()
    assert tracker.open_incident(B) is not None
    await watch.stop()  # stopping twice is harmless


def test_a_silent_node_is_a_silent_incident_of_its_own_kind() -> None:
    """The same rule for the proxies' silent nodes: its own message, and each
    kind closes only its own incidents."""
    clock = FakeClock()
    tracker = IncidentTracker(None, clock=clock)
    reconcile_quarantine(tracker, {A: 1}, {A, B}, clock.t, SILENT)
    reconcile_quarantine(tracker, {B: 1}, {A, B}, clock.t)  # a quarantine besides
    inc = tracker.open_incident(A)
    assert inc is not None and inc.message == "silent"
    # no proxy reports a quarantine any more: the silent incident stays
    reconcile_quarantine(tracker, {}, {A, B}, clock.advance(5))
    assert tracker.open_incident(A) is not None and tracker.open_incident(B) is None
    reconcile_quarantine(tracker, {}, {A, B}, clock.advance(5), SILENT)  # it pushes again
    assert tracker.open_incident(A) is None
