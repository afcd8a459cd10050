"""Retry-After parsing and the back-off a node gets after "too many requests"."""

from __future__ import annotations

import email.utils
import random

from addon.upstream.backoff import MIN_BACKOFF_S, backoff_s, parse_retry_after
from addon.upstream.pool import TIER_SYNCED, Upstream, UpstreamPool
from tests.fakes import FakeClock

NOW = 1_800_000_000.0


def test_retry_after_in_seconds_and_as_an_http_date() -> None:
    assert parse_retry_after("5", NOW) == 5.0
    assert parse_retry_after(" 120 ", NOW) == 120.0
    date = email.utils.formatdate(NOW + 30, usegmt=True)
    assert parse_retry_after(date, NOW) == 30.0
    past = email.utils.formatdate(NOW - 30, usegmt=True)
    assert parse_retry_after(past, NOW) == 0.0


def test_unreadable_retry_after_is_none() -> None:
    for value in (None, "", "soon", "-5", "1.5", "Wed, 99 Foo 2026"):
        assert parse_retry_after(value, NOW) is None, value


def test_backoff_doubles_without_retry_after_and_is_bounded() -> None:
    assert [backoff_s(n, None, 300) for n in (1, 2, 3, 4)] == [1, 2, 4, 8]
    assert backoff_s(40, None, 300) == 300
    assert backoff_s(1, 5.0, 300) == 5.0
    assert backoff_s(1, 86_400.0, 300) == 300  # a broken header cannot bench a node for a day
    assert backoff_s(1, 0.0, 300) == MIN_BACKOFF_S


def _pool(clock: FakeClock) -> tuple[UpstreamPool, Upstream, Upstream]:
    a = Upstream(id="endpoint-srf-a", url="http://a", provider="p", archive=False, tier=TIER_SYNCED)
    b = Upstream(id="endpoint-srf-b", url="http://b", provider="p", archive=False, tier=TIER_SYNCED)
    pool = UpstreamPool(
        [a, b], eject_after=3, eject_cooldown_s=30, clock=clock, rng=random.Random(1)
    )
    return pool, a, b


def test_a_throttled_node_gets_no_calls_until_its_pause_ends() -> None:
    clock = FakeClock(NOW)
    pool, a, b = _pool(clock)
    pool.started(a)
    assert pool.throttled(a, 5, 5.0, "rate-limited") == 5.0
    assert a.inflight == 0 and a.consecutive_failures == 0  # not a failure: no ejection
    assert all(pool.choose(set()) is b for _ in range(20))
    assert pool.backoff_left({b.id}) == 5.0
    clock.advance(5.01)
    assert {pool.choose(set()).id for _ in range(40)} == {a.id, b.id}  # type: ignore[union-attr]


def test_429s_in_a_row_double_the_pause_and_a_success_resets_it() -> None:
    clock = FakeClock(NOW)
    pool, a, _ = _pool(clock)
    pauses = []
    for _ in range(3):
        pool.started(a)
        pauses.append(pool.throttled(a, 5, None, "rate-limited"))
    assert pauses == [1, 2, 4]
    pool.started(a)
    pool.succeeded(a, 10)
    pool.started(a)
    assert pool.throttled(a, 5, None, "rate-limited") == 1


def test_every_node_backing_off_leaves_no_choice() -> None:
    clock = FakeClock(NOW)
    pool, a, b = _pool(clock)
    for u, s in ((a, 3.0), (b, 7.0)):
        pool.started(u)
        pool.throttled(u, 5, s, "rate-limited")
    assert pool.choose(set()) is None
    assert pool.backoff_left(set()) == 3.0
