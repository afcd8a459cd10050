"""The usage store: merging, idempotency, pruning, restart, bounded rows, errors."""

from __future__ import annotations

import math
import sqlite3
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from addon.reporting.usage import UsageAggregator
from common.usage_wire import Rollup, decode_batch, new_batch
from sidecar.usage.rows import hist_json
from sidecar.usage.stats.batch import Batch
from sidecar.usage.stats.window import WINDOW_S, WindowTotals, totals_of, window_start_minute
from sidecar.usage.store import StoreUnavailable, UsageStore
from tests.examples import examples
from tests.sidecar.usage.helpers import EP_A, MINUTE, NOW, batch, r

EP_B = "endpoint-srf-" + "b" * 16
DAY = 86_400
START = MINUTE - WINDOW_S // 60  # the window's first minute at NOW


def assert_same_totals(got: WindowTotals, want: WindowTotals) -> None:
    assert set(got.counts) == {k for k, c in want.counts.items() if c.requests}
    for key, c in got.counts.items():
        w = want.counts[key]
        assert (c.requests, c.errors, c.failovers, c.cache_hits) == (
            w.requests,
            w.errors,
            w.failovers,
            w.cache_hits,
        )
        assert math.isclose(c.latency_ms_sum, w.latency_ms_sum, rel_tol=1e-9, abs_tol=1e-6)
    nonempty = {net: {b: n for b, n in h.items() if n} for net, h in want.hists.items()}
    assert {net: h for net, h in got.hists.items() if h} == {n: h for n, h in nonempty.items() if h}


@pytest.fixture
def store(tmp_path: Path) -> UsageStore:
    s = UsageStore(tmp_path / "usage.sqlite3")
    yield s  # type: ignore[misc]
    s.close()


def test_rollups_of_the_same_key_merge(store: UsageStore) -> None:
    store.ingest(batch(r(n=3, errors=1, bucket=100)), NOW)
    store.ingest(batch(r(n=2, bucket=200), r(n=1, bucket=100)), NOW)  # also within a batch
    t = store.window_totals(NOW)
    c = t.counts[("finney", EP_A)]
    assert (c.requests, c.errors, c.latency_ms_sum) == (6, 1, 600.0)
    assert t.hists == {"finney": {100: 4, 200: 2}}
    assert store.row_counts()["usage_minute"] == 1
    assert store.rebuild_totals(NOW).hists == {"finney": {100: 4, 200: 2}}


def test_the_same_batch_id_is_counted_once(store: UsageStore) -> None:
    b = batch(r(n=5))
    first = store.ingest(b, NOW)
    again = store.ingest(b, NOW + 1)
    assert (first.duplicate, first.rollups, again.duplicate) == (False, 1, True)
    assert store.window_totals(NOW).counts[("finney", EP_A)].requests == 5
    assert store.updated == NOW  # a duplicate is not a new ingest


def test_rollups_older_than_the_window_are_dropped(store: UsageStore) -> None:
    start = window_start_minute(NOW)
    res = store.ingest(batch(r(start - 1, 7), r(start, 2)), NOW)
    assert (res.rollups, res.stored) == (2, 1)
    assert store.window_totals(NOW).counts[("finney", EP_A)].requests == 2


def test_the_window_slides_minute_by_minute(store: UsageStore) -> None:
    start = window_start_minute(NOW)
    store.ingest(batch(r(start, 1), r(start + 1, 2), r(start + 61, 4), r(MINUTE, 8)), NOW)
    assert store.window_totals(NOW).counts[("finney", EP_A)].requests == 15
    assert store.window_totals(NOW + 60).counts[("finney", EP_A)].requests == 14
    assert store.window_totals(NOW + 119).counts[("finney", EP_A)].requests == 14
    assert store.window_totals(NOW + 120).counts[("finney", EP_A)].requests == 12
    assert store.window_totals(NOW + 62 * 60).counts[("finney", EP_A)].requests == 8
    assert store.window_totals(NOW + 62 * 60).hists == {"finney": {250: 8}}
    # Backwards (a clock step) and far forwards rebuild from the database.
    assert store.window_totals(NOW).counts[("finney", EP_A)].requests == 15
    assert store.window_totals(NOW + WINDOW_S + 60).counts == {}


def test_pruning_deletes_old_rollups_and_forgets_batch_ids(store: UsageStore) -> None:
    b = batch(r(MINUTE - 10, 3), r(MINUTE, 4, endpoint=None))
    store.ingest(b, NOW)
    assert store.prune(NOW) == 0
    later = NOW + WINDOW_S + 3600
    assert store.prune(later) > 0
    rows = store.row_counts()
    assert rows.pop("usage_batches") == 1
    assert rows == dict.fromkeys(rows, 0)
    assert store.window_totals(later).counts == {}
    # Batch ids are remembered past the window (8 days), then forgotten.
    assert store.ingest(b, NOW + 7 * DAY).duplicate is True
    store.prune(NOW + 8 * DAY + 1)
    assert store.ingest(b, NOW + 8 * DAY + 2).duplicate is False


def test_ingest_prunes_every_so_often(tmp_path: Path) -> None:
    s = UsageStore(tmp_path / "u.sqlite3", prune_interval_s=600)
    s.ingest(batch(r(MINUTE, 3)), NOW)
    later = NOW + 8 * DAY
    s.ingest(batch(r(int(later // 60), 1)), later)
    assert s.row_counts()["usage_minute"] == 1
    s.close()


def test_a_restart_keeps_rollups_and_updated(tmp_path: Path) -> None:
    path = tmp_path / "usage.sqlite3"
    s = UsageStore(path)
    assert s.updated is None
    b = batch(r(MINUTE - 90, 3, errors=1), r(MINUTE, 2, network="test", endpoint=EP_B))
    s.ingest(b, NOW)
    before = s.window_totals(NOW)
    s.close()
    s2 = UsageStore(path)
    assert s2.updated == NOW
    assert_same_totals(s2.window_totals(NOW), before)
    assert s2.ingest(b, NOW).duplicate is True
    s2.close()


def test_rows_grow_with_keys_not_with_requests(store: UsageStore) -> None:
    keys = [(ep, m) for ep in (EP_A, EP_B, None) for m in ("a", "b")]
    store.ingest(batch(*(r(MINUTE, 1, endpoint=ep, method=m) for ep, m in keys)), NOW)
    rows = store.row_counts()
    for i in range(20):
        store.ingest(
            batch(*(r(MINUTE, 1000, endpoint=ep, method=m, bucket=100 + i % 5) for ep, m in keys)),
            NOW,
        )
    grown = store.row_counts()
    assert grown["usage_batches"] == rows["usage_batches"] + 20
    assert {k: v for k, v in grown.items() if k != "usage_batches"} == {
        "usage_minute": 6,
        "hist_minute": 1,
        "usage_hour": 3,
        "hist_hour": 6,  # buckets 250 and 100..104
        "usage_method_hour": 2,
    }
    assert store.window_totals(NOW).counts[("finney", "")].requests == 2 + 2 * 20 * 1000


def test_a_locked_database_raises_store_unavailable_and_stores_nothing(tmp_path: Path) -> None:
    path = tmp_path / "usage.sqlite3"
    s = UsageStore(path, busy_timeout_ms=50)
    s.ingest(batch(r(n=1)), NOW)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    b = batch(r(n=5))
    with pytest.raises(StoreUnavailable):
        s.ingest(b, NOW)
    assert s.errors == 1
    other.execute("ROLLBACK")
    other.close()
    assert s.window_totals(NOW).counts[("finney", EP_A)].requests == 1
    assert s.ingest(b, NOW).duplicate is False  # the retry is not mistaken for a duplicate
    assert s.window_totals(NOW).counts[("finney", EP_A)].requests == 6
    s.close()


def test_an_unreadable_stored_histogram_does_not_block_ingest(store: UsageStore) -> None:
    store.ingest(batch(r(n=1)), NOW)
    store._db.execute("UPDATE usage_minute SET hist = 'garbage'")
    store.ingest(batch(r(n=2, bucket=7)), NOW)
    (stored,) = store._db.execute("SELECT hist FROM usage_minute").fetchone()
    assert stored == hist_json({7: 2})


def test_an_unopenable_path_raises_store_unavailable(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreUnavailable):
        UsageStore(tmp_path / "file" / "usage.sqlite3")


_rollups = st.lists(
    st.builds(
        Rollup,
        # Mostly near the window's start (where it slides), some anywhere in it.
        minute=st.one_of(st.integers(START - 3, START + 40), st.integers(START - 30, MINUTE + 200)),
        network=st.sampled_from(["finney", "test"]),
        endpoint=st.sampled_from([EP_A, EP_B, None]),
        method=st.sampled_from(["a", "b"]),
        requests=st.just(0),
    ),
    max_size=8,
)


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    steps=st.lists(
        st.tuples(
            st.one_of(st.integers(0, 600), st.integers(0, 400 * 60)),  # slide or rebuild
            _rollups,
            st.integers(1, 20),
            st.booleans(),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_in_memory_totals_match_a_naive_recount(tmp_path: Path, steps: list) -> None:
    """Ingests at increasing times, with pruning: the sliding in-memory totals
    always equal the totals recomputed from every stored rollup."""
    path = tmp_path / f"{uuid.uuid4().hex}.sqlite3"
    s = UsageStore(path, prune_interval_s=1e12)
    kept: list[Rollup] = []
    now = NOW
    for advance, rollups, n, prune in steps:
        now += advance
        # Give each rollup n calls and a histogram (the strategy cannot relate them).
        real = [
            Rollup(
                x.minute,
                x.network,
                x.endpoint,
                x.method,
                n,
                n // 2,
                n // 3,
                0,
                n * 1.5,
                {x.minute % 7: n},
            )
            for x in rollups
        ]
        s.ingest(batch(*real), now)
        start = window_start_minute(now)
        kept += [x for x in real if x.minute >= start]
        if prune:
            s.prune(now)
        assert_same_totals(s.window_totals(now), totals_of(kept, now))
    assert_same_totals(s.rebuild_totals(now), totals_of(kept, now))
    s.close()


def test_the_methods_that_cost_most_units_over_the_window(store: UsageStore) -> None:
    store.ingest(
        batch(
            r(MINUTE, 10, method="state_call", units=170),
            r(MINUTE, 5, method="state_call", endpoint=None, units=5),  # cache hits: 1 each
            r(MINUTE, 100, method="chain_getHeader", units=100),
            r(MINUTE, 3, method="state_getKeysPaged", network="test", units=300),
            r(MINUTE, 7, method="system_health"),  # an older proxy: no units
        ),
        NOW,
    )
    store.ingest(batch(r(MINUTE + 1, 2, method="chain_getHeader", units=2)), NOW)
    methods, units = store.top_methods(NOW)
    assert methods == [
        ("state_getKeysPaged", 3, 300),
        ("state_call", 15, 175),
        ("chain_getHeader", 102, 102),
        ("system_health", 7, 0),
    ]
    assert units == 577
    assert store.top_methods(NOW, "test") == ([("state_getKeysPaged", 3, 300)], 300)
    assert store.top_methods(NOW, limit=1)[0] == [("state_getKeysPaged", 3, 300)]
    # a week and an hour later the hour has left the window, and is pruned
    later = NOW + store.window_s + 3600
    assert store.top_methods(later) == ([], 0)
    store.prune(later + 3600)
    assert store.row_counts()["usage_method_hour"] == 0


def test_units_charged_after_a_call_count_in_no_request(store: UsageStore) -> None:
    """A long operation's later pages (``UsageAggregator.add_units``): the
    proxy's rollup of units alone passes the wire and adds to its method's
    units, and to no count, endpoint or latency."""
    agg = UsageAggregator(clock=lambda: NOW)
    agg.record(
        network="finney",
        method="archive_v1_storage",
        endpoint=None,
        latency_ms=3.0,
        error=False,
        failover=False,
        cache_hit=False,
        units=12,
    )
    store.ingest(batch(r(MINUTE, 4, method="chain_getHeader", units=4)), NOW)
    before = store.window_totals(NOW)
    agg.add_units(network="finney", method="archive_v1_storage", units=30, at=NOW + 1)
    agg.add_units(network="finney", method="state_call", units=5, at=NOW + 1)
    decoded = decode_batch(new_batch(agg.drain(), NOW + 2), ["finney"], NOW + 2)
    assert [(x.method, x.requests, x.units) for x in decoded.rollups] == [
        ("archive_v1_storage", 1, 42),
        ("state_call", 0, 5),
    ]
    store.ingest(Batch(decoded.batch_id, decoded.sent_at, decoded.rollups), NOW + 2)
    after = store.window_totals(NOW + 2)
    assert sum(c.requests for c in after.counts.values()) == 5
    assert sum(c.requests for c in before.counts.values()) == 4
    assert store.top_methods(NOW + 2) == (
        [("archive_v1_storage", 1, 42), ("state_call", 0, 5), ("chain_getHeader", 4, 4)],
        51,
    )


def _total(t: WindowTotals, network: str = "finney") -> int:
    return sum(c.requests for (net, _), c in t.counts.items() if net == network)


def test_the_hours_add_up_to_the_window_at_its_cut_edge(store: UsageStore) -> None:
    """The hour the window's start cuts: its minutes before the start were in
    its hourly bucket while the totals had left them (the stats sweep: buckets
    1,362 against a total of 362 in one document, for up to an hour)."""
    edge = START + 2  # inside the window now; outside 3 minutes later
    store.ingest(batch(r(edge, n=1000), r(MINUTE, n=7)), NOW)
    for at in (NOW, NOW + 180, NOW + 1800):
        hours = store.hourly_series(at)
        assert sum(h[1] for h in hours) == _total(store.window_totals(at)), at
    assert sum(n for _, n in store.hourly_requests(NOW)) == 1007
    assert sum(n for _, n in store.hourly_requests(NOW + 180)) == 7
    assert store.hourly_requests(NOW + 180, "test") == []


def test_a_rollup_ahead_of_the_sidecars_clock_is_counted_now(store: UsageStore) -> None:
    """A proxy whose clock runs ahead (within the hour the wire allows): its
    rollup is counted at the sidecar's minute, never in an hour not begun."""
    store.ingest(batch(r(MINUTE + 30, n=70)), NOW)
    hours = store.hourly_requests(NOW)
    assert hours == [(MINUTE // 60, 70)]
    assert _total(store.window_totals(NOW)) == 70 == _total(store.rebuild_totals(NOW))
