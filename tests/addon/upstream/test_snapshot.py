"""The addon's copy of the sidecar's routing snapshot: applied to the
upstream pools by id, malformed documents refused whole (the background
refresher: tests/addon/hooks/test_snapshot.py)."""

from __future__ import annotations

import random
from dataclasses import astuple
from typing import Any

import pytest

from addon.upstream.pool import (
    TIER_LAGGING,
    TIER_SYNCED,
    TIER_UNHEALTHY,
    TIER_UNPROBED,
    Upstream,
    UpstreamPool,
)
from addon.upstream.snapshot import SnapshotError, apply_snapshot

# --- apply_snapshot -----------------------------------------------------------------------


def make_pool(*ids: str) -> UpstreamPool:
    return UpstreamPool(
        (Upstream(id=i, url=f"https://{i}.example.org", provider=i, archive=False) for i in ids),
        eject_after=3,
        eject_cooldown_s=30.0,
        clock=lambda: 1000.0,
        rng=random.Random(1),
    )


def entry(id_: str, tier: Any = 0, **kw: Any) -> dict[str, Any]:
    e = {
        "id": id_,
        "url": f"https://{id_}.example.org",
        "provider": id_,
        "archive": False,
        "healthy": tier in (0, 1),
        "synced": tier == 0,
        "lag": 0,
        "latency_ms": 20,
        "score": 1.0,
        "tier": tier,
    }
    e.update(kw)
    return e


def doc(*entries: dict[str, Any], tip: Any = 100, finalized: Any = 98) -> dict[str, Any]:
    return {
        "network": "finney",
        "tip": tip,
        "finalized": finalized,
        "generated_at": "2024-01-01T00:00:00Z",
        "upstreams": list(entries),
    }


def state(pool: UpstreamPool) -> dict[str, tuple[Any, ...]]:
    return {uid: astuple(u) for uid, u in pool.upstreams.items()}


def test_applies_tier_score_best_and_archive_by_id() -> None:
    pool = make_pool("a", "b", "c")
    tip_fin = apply_snapshot(
        pool,
        doc(
            entry("b", TIER_LAGGING, score=0.5, best=90, archive=True),
            entry("a", TIER_SYNCED, score=0.9, best=100),
            entry("c", TIER_UNHEALTHY, score=0.1, best=None),
        ),
    )
    assert tip_fin == (100, 98)
    a, b, c = (pool.upstreams[i] for i in "abc")
    assert (a.tier, a.score, a.best, a.archive) == (TIER_SYNCED, 0.9, 100, False)
    assert (b.tier, b.score, b.best, b.archive) == (TIER_LAGGING, 0.5, 90, True)
    assert (c.tier, c.score, c.best) == (TIER_UNHEALTHY, 0.1, None)
    assert a.finalized is None  # a snapshot without each node's finalized height
    apply_snapshot(pool, doc(entry("a", TIER_SYNCED, best=100, finalized=97)))
    assert (a.finalized, b.finalized) == (97, None)  # b not in it: not probed
    # And the choice follows the snapshot: the synced upstream is tried first.
    assert pool.choose(set()) is a
    assert pool.choose({"a"}) is b


def test_a_node_on_another_chain_is_never_chosen() -> None:
    """The sidecar found its genesis another chain's: it answers that chain's
    data, so no call goes to it, even when it is the last node left (the
    client gets "no upstream available" rather than another chain's state)."""
    pool = make_pool("a", "b")
    apply_snapshot(
        pool,
        doc(entry("a", TIER_UNHEALTHY, classification="wrong-chain"), entry("b", TIER_SYNCED)),
    )
    assert pool.choose(set()) is pool.upstreams["b"]
    assert pool.choose({"b"}) is None
    apply_snapshot(pool, doc(entry("a", TIER_SYNCED, classification="live"), entry("b")))
    assert pool.choose({"b"}) is pool.upstreams["a"]  # a full probe cleared it


def test_archive_false_from_the_sidecar_overrides_the_config_flag() -> None:
    pool = make_pool("a")
    pool.upstreams["a"].archive = True  # configured archive
    apply_snapshot(pool, doc(entry("a", archive=False)))
    assert pool.upstreams["a"].archive is False


def test_ids_unknown_to_the_pool_are_ignored() -> None:
    pool = make_pool("a")
    apply_snapshot(pool, doc(entry("a", best=100), entry("stranger", best=200)))
    assert set(pool.upstreams) == {"a"}
    assert pool.upstreams["a"].best == 100


def test_pool_upstreams_missing_from_the_doc_become_unprobed() -> None:
    pool = make_pool("a", "b")
    apply_snapshot(pool, doc(entry("a", best=100), entry("b", TIER_SYNCED, score=0.4, best=99)))
    apply_snapshot(pool, doc(entry("a", best=101)))  # b left the sidecar's list
    b = pool.upstreams["b"]
    assert (b.tier, b.score, b.best) == (TIER_UNPROBED, 1.0, None)
    assert pool.upstreams["a"].best == 101


def test_empty_upstream_list_makes_everything_unprobed() -> None:
    pool = make_pool("a", "b")
    apply_snapshot(pool, doc(entry("a"), entry("b")))
    assert apply_snapshot(pool, doc(tip=None, finalized=None)) == (None, None)
    assert {u.tier for u in pool.upstreams.values()} == {TIER_UNPROBED}


def test_zero_score_does_not_make_an_upstream_unusable() -> None:
    pool = make_pool("a")
    apply_snapshot(pool, doc(entry("a", score=0)))
    assert pool.upstreams["a"].score > 0
    assert pool.choose(set()) is pool.upstreams["a"]


def test_missing_optional_fields_take_safe_defaults() -> None:
    pool = make_pool("a")
    apply_snapshot(pool, {"upstreams": [{"id": "a", "tier": 1}]})
    a = pool.upstreams["a"]
    assert (a.tier, a.score, a.best, a.archive) == (1, 1.0, None, False)


MALFORMED = {
    "missing upstreams": {"network": "finney", "tip": 100, "finalized": 98},
    "upstreams null": doc() | {"upstreams": None},
    "upstreams not a list of objects": doc() | {"upstreams": [1, 2]},
    "entry without id": doc({k: v for k, v in entry("a").items() if k != "id"}),
    "entry without tier": doc({k: v for k, v in entry("a").items() if k != "tier"}),
    "tier not a number": doc(entry("a"), entry("b", tier="fast")),
    "tier null": doc(entry("a"), entry("b", tier=None)),
    "tip a string": doc(entry("a"), tip="100"),
    "tip a float": doc(entry("a"), tip=100.5),
    "tip a bool": doc(entry("a"), tip=True),
    "finalized a string": doc(entry("a"), finalized="0x62"),
    "best a bool": doc(entry("a"), entry("b", best=True)),
    "best a string": doc(entry("a"), entry("b", best="99")),
    "score not a number": doc(entry("a"), entry("b", score="high")),
}


@pytest.mark.parametrize("bad", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_docs_raise_and_leave_the_pool_unchanged(bad: dict[str, Any]) -> None:
    pool = make_pool("a", "b")
    apply_snapshot(pool, doc(entry("a", TIER_LAGGING, best=7, archive=True), entry("b", 3)))
    before = state(pool)
    with pytest.raises(SnapshotError):
        apply_snapshot(pool, bad)
    assert state(pool) == before


@pytest.mark.parametrize("bad", [None, [], "routes", 5], ids=["null", "list", "string", "number"])
def test_a_document_that_is_not_an_object_raises_snapshot_error(bad: Any) -> None:
    pool = make_pool("a")
    before = state(pool)
    with pytest.raises(SnapshotError):
        apply_snapshot(pool, bad)
    assert state(pool) == before
