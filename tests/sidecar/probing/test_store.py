"""SQLite probe history and per-endpoint health: a restart
resumes with the same health, history is bounded, and a failing disk is logged
and counted instead of breaking the probe loop."""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from sidecar.probing.health import Health, apply
from sidecar.probing.results import LIVE, TIMEOUT, ProbeResult
from sidecar.probing.store import Store
from tests.sidecar.helpers import probe_result

A = "endpoint-srf-aaaaaaaaaaaaaaaa"
B = "endpoint-srf-bbbbbbbbbbbbbbbb"
NOW = 1_700_000_000.0


def probe(eid: str = A, at: float = NOW, classification: str = LIVE, **kw: object) -> ProbeResult:
    return probe_result(eid, at, classification, **kw)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "sidecar.sqlite3"


@pytest.fixture
def store(path: Path) -> Iterator[Store]:
    s = Store(path)
    yield s
    s.close()


def a_real_health() -> Health:
    """A health value built the way the prober builds it, with every field set."""
    h = Health()
    results = [
        probe(at=NOW, latency_ms=80, best=100, finalized=98, archive=True),
        probe(at=NOW + 6, classification=TIMEOUT),
        probe(at=NOW + 12, classification=TIMEOUT),
        probe(at=NOW + 18, latency_ms=40, best=103, finalized=101),
    ]
    for r in results:
        h, _ = apply(h, r, fail_threshold=2, recover_threshold=2)
    assert h.status == "Degraded" and h.recent == (True, False, False, True)
    return h


def test_creates_the_data_directory(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "db.sqlite3"
    Store(path).close()
    assert path.exists()


def test_health_survives_a_restart(path: Path) -> None:
    h_a = a_real_health()
    h_b = Health(status="OK", last_probe_at=NOW, latency_ms=12.5, recent=(True,) * 20)
    s = Store(path)
    s.record([probe(A), probe(B)], {A: h_a, B: h_b}, NOW)
    s.close()

    again = Store(path)
    try:
        loaded = again.load_health()
    finally:
        again.close()
    assert loaded == {A: h_a, B: h_b}
    assert isinstance(loaded[A].recent, tuple)
    assert loaded[A].status == "Degraded" and loaded[A].message == TIMEOUT
    assert loaded[A].score == pytest.approx(0.5)
    assert loaded[A].consecutive_successes == 1  # the recovery count carries over too


def test_health_is_upserted_not_duplicated(store: Store) -> None:
    store.record([], {A: Health(status="OK", best=1)}, NOW)
    store.record([], {A: Health(status="Degraded", best=2)}, NOW)
    loaded = store.load_health()
    assert list(loaded) == [A]
    assert loaded[A].status == "Degraded" and loaded[A].best == 2


def test_recording_health_of_one_endpoint_keeps_the_others(store: Store) -> None:
    store.record([], {A: Health(status="OK"), B: Health(status="OK")}, NOW)
    store.record([], {A: Health(status="Degraded")}, NOW)
    loaded = store.load_health()
    assert loaded[A].status == "Degraded" and loaded[B].status == "OK"


def test_recent_probes_newest_first_with_every_field(store: Store) -> None:
    full = probe(
        at=NOW + 2,
        latency_ms=33,
        best=100,
        finalized=98,
        archive=False,
        detail="d" * 500,
    )
    store.record([probe(at=NOW), full], {}, NOW)
    store.record([probe(at=NOW + 1, classification=TIMEOUT, archive=True)], {}, NOW)
    store.record([probe(B, at=NOW + 5)], {}, NOW)
    got = store.recent_probes(A)
    assert [p.at for p in got] == [NOW + 2, NOW + 1, NOW]
    newest = got[0]
    assert (newest.latency_ms, newest.best, newest.finalized, newest.archive) == (
        33,
        100,
        98,
        False,
    )
    assert newest.kind == "full" and newest.classification == LIVE
    assert newest.detail == "d" * 300  # bounded
    assert got[1].archive is True and got[1].classification == TIMEOUT
    assert got[2].archive is None and got[2].latency_ms is None and got[2].best is None
    assert [p.endpoint_id for p in store.recent_probes(B)] == [B]
    assert len(store.recent_probes(A, limit=2)) == 2


def test_prune_by_age(path: Path) -> None:
    s = Store(path, retention_s=3600)
    try:
        old = [probe(at=NOW - 7200 + i) for i in range(5)]
        fresh = [probe(at=NOW - 60 + i) for i in range(3)]
        s.record(old + fresh, {}, NOW - 7200)  # the first write prunes against its own `now`
        assert s.probe_count() == 8
        assert s.prune(NOW) == 5
        assert s.probe_count() == 3
        assert {p.at for p in s.recent_probes(A)} == {r.at for r in fresh}
    finally:
        s.close()


def test_prune_by_per_endpoint_cap_keeps_the_newest(path: Path) -> None:
    s = Store(path, max_probes_per_endpoint=5)
    try:
        s.record([], {}, NOW)  # the first write's automatic prune, out of the way
        s.record([probe(A, at=NOW + i) for i in range(8)], {}, NOW)
        s.record([probe(B, at=NOW + i) for i in range(3)], {}, NOW)
        assert s.probe_count() == 11
        assert s.prune(NOW + 100) == 3
        assert [p.at for p in s.recent_probes(A, limit=100)] == [NOW + i for i in (7, 6, 5, 4, 3)]
        assert len(s.recent_probes(B, limit=100)) == 3  # other endpoints keep theirs
    finally:
        s.close()


def test_probe_count_stays_bounded_over_many_writes(path: Path) -> None:
    cap = 10
    s = Store(path, max_probes_per_endpoint=cap)
    try:
        for i in range(450):
            s.record([probe(A, at=NOW + i), probe(B, at=NOW + i)], {}, NOW + i)
        # Pruning runs every so often (not on every write): the table may exceed
        # the cap by what was written since the last prune, never by more.
        assert s.probe_count() <= 2 * (cap + 100)
        assert len(s.recent_probes(A, limit=1000)) <= cap + 100
        assert s.recent_probes(A, limit=1)[0].at == NOW + 449  # the newest is kept
        assert s.errors == 0
    finally:
        s.close()


def test_old_probes_disappear_without_an_explicit_prune(path: Path) -> None:
    day = 86400.0
    s = Store(path, retention_s=day)
    try:
        for i in range(250):  # one probe every ten minutes for ~41 hours
            at = NOW + i * 600
            s.record([probe(at=at)], {}, at)
        oldest = min(p.at for p in s.recent_probes(A, limit=1000))
        last = NOW + 249 * 600
        assert last - oldest <= day + 100 * 600  # at most one prune period past retention
        assert s.probe_count() < 250
    finally:
        s.close()


def test_write_error_after_close_is_counted_not_raised(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    store.close()
    with caplog.at_level(logging.ERROR, logger="chainproxy.sidecar.store"):
        store.record([probe()], {A: Health(status="OK")}, NOW)  # must not raise
    assert store.errors == 1
    assert any("probe store write failed" in r.getMessage() for r in caplog.records)


def test_write_error_rolls_back_the_whole_batch(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    store.record([probe(at=NOW)], {A: Health(status="OK")}, NOW)
    store._db.execute("DROP TABLE health")  # e.g. a damaged database file
    with caplog.at_level(logging.ERROR, logger="chainproxy.sidecar.store"):
        store.record([probe(at=NOW + 1), probe(at=NOW + 2)], {A: Health(status="OK")}, NOW)
    assert store.errors == 1
    assert store.probe_count() == 1  # the probes of the failed batch were not half-written
    assert any(r.levelno == logging.ERROR for r in caplog.records)


def test_locked_database_is_counted_not_raised(path: Path) -> None:
    s = Store(path)
    other = sqlite3.connect(path, isolation_level=None)
    try:
        s._db.execute("PRAGMA busy_timeout=50")  # do not wait the default 2 s here
        other.execute("BEGIN EXCLUSIVE")
        s.record([probe()], {A: Health(status="OK")}, NOW)
        assert s.errors == 1
        other.execute("ROLLBACK")
        s.record([probe()], {A: Health(status="OK")}, NOW)  # and it works again afterwards
        assert s.errors == 1
        assert s.probe_count() == 1
        assert s.load_health()[A].status == "OK"
    finally:
        other.close()
        s.close()


def test_prune_error_is_counted_not_raised(store: Store) -> None:
    store._db.execute("DROP TABLE probes")
    assert store.prune(NOW) == 0
    assert store.errors == 1


def _insert_raw(path: Path, rows: list[tuple[str, str]]) -> None:
    db = sqlite3.connect(path)
    with db:
        db.executemany("INSERT OR REPLACE INTO health (endpoint_id, state) VALUES (?, ?)", rows)
    db.close()


def _load_after_inserting(path: Path, rows: list[tuple[str, str]]) -> dict[str, Health]:
    s = Store(path)
    s.record([], {A: Health(status="OK", best=7)}, NOW)
    s.close()
    _insert_raw(path, rows)
    s = Store(path)
    try:
        return s.load_health()
    finally:
        s.close()


def test_unreadable_health_rows_are_skipped(path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rows = [
        ("endpoint-srf-notjson000000000", "{not json"),
        ("endpoint-srf-badrecent0000000", json.dumps({"recent": 5})),
    ]
    with caplog.at_level(logging.WARNING, logger="chainproxy.sidecar.store"):
        loaded = _load_after_inserting(path, rows)
    assert loaded == {A: Health(status="OK", best=7)}
    assert sum("unreadable health row" in r.getMessage() for r in caplog.records) == 2


@pytest.mark.parametrize("state", ["null", "[1, 2]", '"OK"', "42"])
def test_health_rows_that_are_not_objects_are_skipped(path: Path, state: str) -> None:
    loaded = _load_after_inserting(path, [("endpoint-srf-notanobject000", state)])
    assert loaded == {A: Health(status="OK", best=7)}


def test_health_rows_from_another_version_load(path: Path) -> None:
    Store(path).close()
    state = {"status": "Degraded", "best": 9, "recent": [True, False], "added_later": 1}
    _insert_raw(path, [(A, json.dumps(state))])
    s = Store(path)
    try:
        h = s.load_health()[A]
    finally:
        s.close()
    assert h.status == "Degraded" and h.best == 9 and h.recent == (True, False)
    assert h.latency_ms is None and h.probed is False  # missing fields take their defaults
