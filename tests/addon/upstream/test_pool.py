"""Choosing an upstream: tiers, archive preference, P2C, passive ejection
with a fake clock and a seeded random generator."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addon.upstream.pool import (
    TIER_LAGGING,
    TIER_SYNCED,
    TIER_UNHEALTHY,
    TIER_UNPROBED,
    Upstream,
    UpstreamPool,
)
from common.config import parse_config
from tests.examples import examples
from tests.fakes import FakeClock


def up(id_: str, tier: int = TIER_SYNCED, *, archive: bool = False, **kw: float) -> Upstream:
    u = Upstream(id=id_, url=f"http://{id_}.example:9944", provider=f"p-{id_}", archive=archive)
    u.tier = tier
    for k, v in kw.items():
        setattr(u, k, v)
    return u


def pool(
    *ups: Upstream, clock: FakeClock | None = None, seed: int = 1, eject_after: int = 3
) -> tuple[UpstreamPool, FakeClock]:
    clock = clock or FakeClock(1000.0)
    p = UpstreamPool(
        ups,
        eject_after=eject_after,
        eject_cooldown_s=30.0,
        clock=clock,
        rng=random.Random(seed),
    )
    return p, clock


def eject(p: UpstreamPool, u: Upstream) -> None:
    for _ in range(p.eject_after):
        p.started(u)
        p.failed(u, 5.0)


def test_tiers_are_tried_in_order() -> None:
    synced, lagging, unprobed, unhealthy, ejected = (
        up("synced"),
        up("lagging", TIER_LAGGING),
        up("unprobed", TIER_UNPROBED),
        up("unhealthy", TIER_UNHEALTHY),
        up("ejected"),
    )
    p, _ = pool(ejected, unhealthy, unprobed, lagging, synced)
    eject(p, ejected)
    order = []
    tried: set[str] = set()
    while (u := p.choose(tried)) is not None:
        order.append(u.id)
        tried.add(u.id)
    assert order == ["synced", "lagging", "unprobed", "unhealthy", "ejected"]


def test_ejected_synced_node_sinks_below_an_unhealthy_one() -> None:
    a, b = up("a"), up("b", TIER_UNHEALTHY)
    p, _ = pool(a, b)
    eject(p, a)
    assert p.choose(set()) is b


def test_only_an_ejected_node_left_is_still_used_as_last_resort() -> None:
    a = up("a")
    p, _ = pool(a)
    eject(p, a)
    assert p.choose(set()) is a


def test_excluded_upstreams_are_never_chosen() -> None:
    ups = [up(x) for x in "abcd"]
    p, _ = pool(*ups)
    for _ in range(200):
        chosen = p.choose({"a", "c"})
        assert chosen is not None and chosen.id in {"b", "d"}
    assert p.choose({"a", "b", "c", "d"}) is None


def test_empty_pool_gives_none() -> None:
    p, _ = pool()
    assert p.choose(set()) is None
    assert len(p) == 0


def test_prefer_archive() -> None:
    node, archive = up("node"), up("archive", TIER_LAGGING, archive=True)
    p, _ = pool(node, archive)
    assert p.choose(set()) is node
    assert p.choose(set(), prefer_archive=True) is archive
    # the archive already tried: fall back to the rest rather than give up
    assert p.choose({"archive"}, prefer_archive=True) is node


def test_prefer_archive_without_archive_nodes_is_a_normal_choice() -> None:
    a, b = up("a"), up("b", TIER_LAGGING)
    p, _ = pool(a, b)
    assert p.choose(set(), prefer_archive=True) is a


def test_prefer_archive_picks_the_better_tier_among_archives() -> None:
    a1 = up("a1", TIER_UNHEALTHY, archive=True)
    a2 = up("a2", TIER_SYNCED, archive=True)
    p, _ = pool(up("n"), a1, a2)
    assert p.choose(set(), prefer_archive=True) is a2


def test_load_aware_choice_avoids_a_busy_upstream() -> None:
    a, b = up("a", ewma_ms=10.0, updated_at=1000.0), up("b", ewma_ms=10.0, updated_at=1000.0)
    p, _ = pool(a, b)
    for _ in range(20):
        p.started(a)
    assert all(p.choose(set()) is b for _ in range(100))


def test_within_a_tier_both_healthy_nodes_get_traffic() -> None:
    ups = [up(x) for x in "abc"]
    p, clock = pool(*ups)
    counts: Counter[str] = Counter()
    for _ in range(900):
        clock.advance(0.05)
        u = p.choose(set())
        assert u is not None
        p.started(u)
        p.succeeded(u, 20.0)
        counts[u.id] += 1
    assert all(counts[x] > 150 for x in "abc"), counts


def simulate(latencies: dict[str, float], n: int, step_s: float, seed: int = 7) -> Counter[str]:
    ups = [up(x) for x in latencies]
    p, clock = pool(*ups, seed=seed)
    for u in ups:  # one measurement each to start from
        p.started(u)
        p.succeeded(u, latencies[u.id])
    counts: Counter[str] = Counter()
    for _ in range(n):
        clock.advance(step_s)
        u = p.choose(set())
        assert u is not None
        p.started(u)
        p.succeeded(u, latencies[u.id])
        counts[u.id] += 1
    return counts


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_slow_node_gets_clearly_less_traffic(seed: int) -> None:
    counts = simulate({"slow": 300.0, "fast1": 10.0, "fast2": 10.0}, 1000, 0.05, seed)
    assert sum(counts.values()) == 1000
    assert counts["slow"] < 0.1 * min(counts["fast1"], counts["fast2"]), counts


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_slow_node_is_not_starved_over_a_long_time(seed: int) -> None:
    # 1,000 requests over ~17 simulated minutes: the slow node's estimate decays
    # and it is re-measured now and then
    counts = simulate({"slow": 300.0, "fast1": 10.0, "fast2": 10.0}, 1000, 1.0, seed)
    assert counts["slow"] > 0, counts
    assert counts["slow"] < counts["fast1"] and counts["slow"] < counts["fast2"]


def test_ejection_after_consecutive_failures_for_the_cooldown() -> None:
    a, b = up("a"), up("b", TIER_LAGGING)
    p, clock = pool(a, b)
    for _ in range(2):
        p.started(a)
        p.failed(a, 50.0)
    assert p.choose(set()) is a  # two failures: not yet
    p.started(a)
    p.failed(a, 50.0)
    assert p.choose(set()) is b  # third in a row: ejected
    clock.advance(29.9)
    assert p.choose(set()) is b
    clock.advance(0.2)
    assert p.choose(set()) is a  # cool-down over: eligible again


def test_a_success_resets_the_failure_count() -> None:
    a, b = up("a"), up("b", TIER_LAGGING)
    p, _ = pool(a, b)
    for _ in range(5):
        p.started(a)
        p.failed(a, 50.0)
        p.started(a)
        p.failed(a, 50.0)
        p.started(a)
        p.succeeded(a, 50.0)
    assert p.choose(set()) is a


def test_eject_settings_come_from_the_config() -> None:
    cfg = parse_config(
        {"proxy": {"failover": {"eject_after": 1, "eject_cooldown_s": 5}}}, {}
    ).proxy.failover
    a, b = up("a"), up("b", TIER_LAGGING)
    clock = FakeClock(1000.0)
    p = UpstreamPool(
        [a, b], eject_after=cfg.eject_after, eject_cooldown_s=cfg.eject_cooldown_s, clock=clock
    )
    p.started(a)
    p.failed(a, 1.0)
    assert p.choose(set()) is b
    clock.advance(5.01)
    assert p.choose(set()) is a


def test_a_node_failing_fast_does_not_attract_traffic() -> None:
    # a node that answers errors in 1 ms must not look like the fastest node
    a, b = up("a"), up("b")
    p, clock = pool(a, b, eject_after=1000)
    p.started(b)
    p.succeeded(b, 40.0)
    counts: Counter[str] = Counter()
    for _ in range(300):
        clock.advance(0.02)
        u = p.choose(set())
        assert u is not None
        p.started(u)
        if u is a:
            p.failed(u, 1.0)
        else:
            p.succeeded(u, 40.0)
        counts[u.id] += 1
    assert counts["a"] < counts["b"], counts


def test_inflight_is_balanced_by_started_and_finished() -> None:
    a = up("a")
    p, _ = pool(a)
    p.started(a)
    p.started(a)
    p.succeeded(a, 10.0)
    p.failed(a, 10.0)
    assert a.inflight == 0
    assert a.requests == 2 and a.failures == 1


upstream_specs = st.lists(
    st.tuples(
        st.sampled_from([TIER_SYNCED, TIER_LAGGING, TIER_UNPROBED, TIER_UNHEALTHY]),
        st.booleans(),  # ejected
        st.booleans(),  # archive
        st.floats(0, 5000),  # ewma
        st.integers(0, 50),  # inflight
        st.floats(0, 2),  # score
        st.booleans(),  # excluded
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=examples(300), deadline=None)
@given(specs=upstream_specs, seed=st.integers(0, 2**32), prefer_archive=st.booleans())
def test_property_never_an_ejected_or_unhealthy_node_while_a_healthy_synced_one_is_free(
    specs: list[tuple[int, bool, bool, float, int, float, bool]],
    seed: int,
    prefer_archive: bool,
) -> None:
    clock = FakeClock(1000.0)
    ups = []
    exclude = set()
    for i, (tier, ejected, archive, ewma, inflight, score, excluded) in enumerate(specs):
        u = up(f"u{i}", tier, archive=archive, ewma_ms=ewma, score=score, updated_at=990.0)
        u.inflight = inflight
        if ejected:
            u.ejected_until = clock.t + 10
        if excluded:
            exclude.add(u.id)
        ups.append(u)
    p, _ = pool(*ups, clock=clock, seed=seed)

    def good(u: Upstream) -> bool:
        return u.tier == TIER_SYNCED and u.ejected_until <= clock.t

    free = [u for u in ups if u.id not in exclude]
    if prefer_archive and any(u.archive for u in free):
        free = [u for u in free if u.archive]  # the archive preference narrows the field
    chosen = p.choose(exclude, prefer_archive=prefer_archive)
    if not [u for u in ups if u.id not in exclude]:
        assert chosen is None
        return
    assert chosen is not None and chosen.id not in exclude
    if any(good(u) for u in free):
        assert good(chosen)
