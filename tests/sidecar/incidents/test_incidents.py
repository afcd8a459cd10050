"""Incidents from health transitions: thresholds, flapping, durations, severity,
restart reconciliation, retention and persistence (plain pytest, injected clock)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path

import pytest

from common.config import Config, Endpoint, ProbeConfig, parse_config
from sidecar.incidents.store import IncidentStore
from sidecar.incidents.tracker import DOWN_AFTER_S, Incident, IncidentTracker, format_duration
from sidecar.probing.health import Health
from sidecar.probing.prober import Prober
from sidecar.probing.results import ProbeResult
from tests.fakes import FakeClock

T0 = 1_800_000_000.0


def _config(n: int = 2) -> Config:
    return parse_config(
        {
            "registry": {
                "endpoints": [
                    {
                        "url": f"http://node{i}.example:9944",
                        "provider": f"p{i}",
                        "kind": "node-rpc",
                        "network": "finney",
                    }
                    for i in range(n)
                ]
            }
        },
        env={},
    )


async def _never(_e: Endpoint, _k: str) -> ProbeResult:
    raise AssertionError("not scheduled in these tests")


class Rig:
    """A Prober fed by hand (``observe``) with a tracker on its hook."""

    def __init__(
        self, *, fail: int = 2, recover: int = 2, sink: IncidentStore | None = None
    ) -> None:
        self.clock = FakeClock()
        self.config = _config()
        self.e = self.config.endpoints[0]
        self.tracker = IncidentTracker(sink, clock=self.clock)
        self.prober = Prober(
            self.config.endpoints,
            _never,
            ProbeConfig(fail_threshold=fail, recover_threshold=recover),
            None,
            clock=self.clock,
            on_transition=self.tracker.on_transition,
        )

    def probe(self, outcome: str, *, advance: float = 60.0, e: Endpoint | None = None) -> None:
        self.clock.t += advance
        e = e or self.e
        latency = 20 if outcome == "live" else None
        self.prober.observe(e, ProbeResult(e.id, self.clock.t, "full", outcome, latency))

    def run(self, outcomes: Iterable[str]) -> None:
        for o in outcomes:
            self.probe(o)


def test_opens_at_fail_threshold_and_closes_at_recover_threshold() -> None:
    rig = Rig(fail=3, recover=2)
    rig.run(["live", "dead", "dead"])
    assert rig.tracker.incidents() == []  # two failures: below the threshold
    rig.probe("dead")
    [inc] = rig.tracker.incidents()
    assert inc.ongoing and inc.state == "ongoing" and inc.message == "dead"
    assert inc.started == rig.clock.t  # the probe that crossed the threshold
    rig.run(["timeout", "live"])
    assert rig.tracker.incidents()[0].ongoing  # one success is not a recovery
    rig.probe("live")
    [inc] = rig.tracker.incidents()
    assert inc.state == "resolved" and inc.ended == rig.clock.t
    assert inc.duration_s(rig.clock.t + 9999) == 3 * 60  # fixed once resolved


def test_message_is_the_classification_that_opened_it() -> None:
    rig = Rig(fail=2)
    rig.run(["live", "timeout", "http-503"])
    assert rig.tracker.incidents()[0].message == "http-503"
    rig.probe("dead")  # later failures do not rewrite it
    assert rig.tracker.incidents()[0].message == "http-503"


def test_flapping_below_the_thresholds_never_opens_an_incident() -> None:
    rig = Rig(fail=2, recover=2)
    rig.run(["live", "dead", "live", "dead", "live", "dead", "live"] * 5)
    assert rig.tracker.incidents() == []


def test_flapping_while_degraded_keeps_one_incident_open() -> None:
    rig = Rig(fail=2, recover=2)
    rig.run(["live", "dead", "dead"])
    rig.run(["live", "dead", "live", "dead", "live", "dead"] * 3)
    assert len(rig.tracker.incidents()) == 1 and rig.tracker.incidents()[0].ongoing
    rig.run(["live", "live"])
    rig.run(["dead", "dead"])  # a new outage is a new incident
    incs = rig.tracker.incidents()
    assert [i.state for i in incs] == ["ongoing", "resolved"]  # newest first
    assert incs[0].id > incs[1].id


def test_incidents_are_per_endpoint() -> None:
    rig = Rig(fail=1)
    e2 = rig.config.endpoints[1]
    rig.probe("live")
    rig.probe("live", e=e2)
    rig.probe("dead")
    rig.probe("dead", e=e2)
    assert {i.endpoint_id for i in rig.tracker.incidents()} == {rig.e.id, e2.id}
    rig.probe("live")
    rig.probe("live")
    assert rig.tracker.open_incident(rig.e.id) is None
    assert rig.tracker.open_incident(e2.id) is not None


def test_open_twice_and_close_without_open_change_nothing() -> None:
    t = IncidentTracker(clock=FakeClock())
    assert t.close("x", T0) is None
    assert t.open("x", T0, "dead") is not None
    assert t.open("x", T0 + 5, "timeout") is None
    assert len(t) == 1
    closed = t.close("x", T0 - 100)  # a clock step back never makes a negative duration
    assert closed is not None and closed.ended == T0 and closed.duration_s(T0 + 1e6) == 0


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0h 00m"),
        (59.9, "0h 00m"),
        (60, "0h 01m"),
        (7500, "2h 05m"),
        (3600 * 26 + 600, "26h 10m"),
        (-5, "0h 00m"),
    ],
)
def test_duration_is_hours_and_minutes(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_severity_becomes_down_after_ten_minutes() -> None:
    inc = Incident(1, "e", T0, "dead")
    assert inc.severity(T0 + DOWN_AFTER_S - 1) == "Degraded"
    assert inc.severity(T0 + DOWN_AFTER_S) == "Down"
    short = Incident(2, "e", T0, "dead", ended=T0 + 120)
    assert short.severity(T0 + 10 * DOWN_AFTER_S) == "Degraded"  # it lasted 2 minutes
    long = Incident(3, "e", T0, "dead", ended=T0 + 3600)
    assert long.severity(T0 + 3600) == "Down"


def _h(status: str, **kw: object) -> Health:
    return Health(status=status, last_probe_at=T0, **kw)  # type: ignore[arg-type]


def test_reconcile_closes_what_restored_health_contradicts() -> None:
    clock = FakeClock(T0 + 1000)
    t = IncidentTracker(clock=clock)
    for eid in ("ok", "degraded", "unknown", "gone", "missing"):
        t.open(eid, T0, "dead")
    health = {
        "ok": _h("OK", last_ok_at=T0 + 300),
        "degraded": _h("Degraded", message="dead"),
        "unknown": Health(),
    }
    t.reconcile(health, ["ok", "degraded", "unknown", "missing"], clock())
    by = {i.endpoint_id: i for i in t.incidents()}
    assert by["ok"].ended == T0 + 300  # recovered at its last good probe
    assert by["degraded"].ongoing  # still failing: stays open
    assert by["unknown"].ended == clock.t and by["missing"].ended == clock.t
    assert by["gone"].ended == clock.t  # no longer in the registry


def test_reconcile_opens_an_incident_for_a_degraded_endpoint_without_one() -> None:
    t = IncidentTracker(clock=FakeClock(T0 + 50))
    t.reconcile({"a": _h("Degraded", message="timeout"), "b": _h("OK")}, ["a", "b"], T0 + 50)
    [inc] = t.incidents()
    assert (inc.endpoint_id, inc.started, inc.message, inc.ongoing) == ("a", T0, "timeout", True)


def test_retention_drops_old_and_excess_resolved_but_never_ongoing() -> None:
    clock = FakeClock()
    t = IncidentTracker(clock=clock, retention_s=86400, max_rows=5)
    t.open("old-ongoing", T0, "dead")
    for n in range(10):
        t.open(f"e{n}", T0 + n, "dead")
        t.close(f"e{n}", T0 + n + 1)
    assert len(t) == 5
    assert t.open_incident("old-ongoing") is not None
    assert {i.endpoint_id for i in t.incidents() if not i.ongoing} == {"e6", "e7", "e8", "e9"}
    clock.t = T0 + 2 * 86400
    t.prune(clock())
    assert [i.endpoint_id for i in t.incidents()] == ["old-ongoing"]


def test_store_round_trip_and_restart(tmp_path: Path) -> None:
    path = tmp_path / "sidecar.sqlite3"
    store = IncidentStore(path)
    rig = Rig(fail=2, sink=store)
    rig.run(["live", "dead", "dead", "live", "live", "timeout", "timeout"])
    before = rig.tracker.incidents()
    assert [i.state for i in before] == ["ongoing", "resolved"]
    store.close()

    store2 = IncidentStore(path)
    t2 = IncidentTracker(store2, clock=FakeClock(T0 + 10_000))
    assert t2.incidents() == before
    assert t2.open_incident(rig.e.id) == before[0]
    new = t2.open("other", T0 + 10_000, "dead")
    assert new is not None and new.id > max(i.id for i in before)  # ids never reused
    store2.close()


def test_store_skips_damaged_rows(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    IncidentStore(path).close()
    db = sqlite3.connect(path)
    db.execute("INSERT INTO incidents VALUES (1, 'a', 'not a time', NULL, 'dead')")
    db.execute("INSERT INTO incidents VALUES (2, 'b', 10.0, NULL, 'dead')")
    db.commit()
    db.close()
    store = IncidentStore(path)
    assert [i.id for i in store.load()] == [2]
    store.close()


class FlakySink:
    def __init__(self) -> None:
        self.fail = True
        self.saved: dict[int, Incident] = {}

    def load(self) -> list[Incident]:
        return []

    def save(self, incidents: Iterable[Incident]) -> None:
        if self.fail:
            raise sqlite3.OperationalError("database is locked")
        self.saved.update({i.id: i for i in incidents})

    def delete(self, ids: Iterable[int]) -> None:
        if self.fail:
            raise sqlite3.OperationalError("database is locked")


def test_a_failed_write_is_counted_and_retried_never_raised() -> None:
    sink = FlakySink()
    t = IncidentTracker(sink, clock=FakeClock())
    t.open("a", T0, "dead")  # the write fails: no exception into the probe loop
    assert t.write_errors == 1 and t.open_incident("a") is not None
    sink.fail = False
    t.close("a", T0 + 60)
    assert sink.saved[1].ended == T0 + 60


def test_two_open_rows_for_one_endpoint_load_as_one_open(tmp_path: Path) -> None:
    store = IncidentStore(tmp_path / "s.sqlite3")
    store.save([Incident(1, "a", T0, "dead"), Incident(2, "a", T0 + 60, "timeout")])
    t = IncidentTracker(store, clock=FakeClock(T0 + 120))
    assert [i.state for i in t.incidents()] == ["ongoing", "resolved"]
    assert t.open_incident("a") == Incident(2, "a", T0 + 60, "timeout")
    store.close()
