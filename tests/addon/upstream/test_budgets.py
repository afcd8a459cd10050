"""A node's budget: an exact sliding second, calls in flight, and a rate
learned from its 429s (cut, then grown slowly)."""

from __future__ import annotations

import pytest

from addon.upstream.budgets import (
    LEARN_CUT,
    LEARN_FORGET_S,
    LEARN_GROWTH_PER_S,
    WINDOW_S,
    Budgets,
    NodeBudget,
    Ticket,
)
from common.config import Endpoint
from tests.fakes import FakeClock


def _endpoint(eid: str, max_rps: int | None = None, max_concurrency: int | None = None) -> Endpoint:
    return Endpoint(
        url=f"http://{eid}",
        provider="p",
        kind="rpc-http",
        network="finney",
        id=eid,
        max_rps=max_rps,
        max_concurrency=max_concurrency,
    )


def test_never_more_than_max_rps_in_any_second() -> None:
    clock = FakeClock(100.0)
    book = Budgets([_endpoint("a", max_rps=20)], clock=clock)
    sent: list[float] = []
    # offered 100 calls/s for 3 s, one every 10 ms
    for _ in range(300):
        if isinstance(book.try_take("a", 1), Ticket):
            sent.append(clock.t)
        clock.advance(0.01)
    assert len(sent) >= 55  # ~20 a second were sent
    for i, t in enumerate(sent):  # any window of one second holds at most 20
        assert sum(1 for u in sent[i:] if u < t + 1.0) <= 20


def test_refusal_says_when_the_calls_will_fit() -> None:
    clock = FakeClock(100.0)
    book = Budgets([_endpoint("a", max_rps=2)], clock=clock)
    assert isinstance(book.try_take("a", 1), Ticket)
    clock.advance(0.3)
    assert isinstance(book.try_take("a", 1), Ticket)
    wait = book.try_take("a", 1)
    assert wait == pytest.approx(WINDOW_S - 0.3)  # when the first call leaves the window
    assert book.try_take("a", 2) == pytest.approx(WINDOW_S)  # a batch of 2: both must leave


def test_a_batch_counts_its_calls_and_one_larger_than_the_budget_goes_alone() -> None:
    clock = FakeClock(100.0)
    book = Budgets([_endpoint("a", max_rps=10)], clock=clock)
    assert isinstance(book.try_take("a", 6), Ticket)
    assert not isinstance(book.try_take("a", 6), Ticket)
    clock.advance(WINDOW_S)
    assert isinstance(book.try_take("a", 50), Ticket)  # empty window: sent alone
    assert not isinstance(book.try_take("a", 1), Ticket)


def test_calls_in_flight_are_bounded_and_released() -> None:
    clock = FakeClock(100.0)
    book = Budgets([_endpoint("a", max_concurrency=2)], clock=clock)
    t1, t2 = book.try_take("a", 1), book.try_take("a", 1)
    assert isinstance(t1, Ticket) and isinstance(t2, Ticket)
    assert not isinstance(book.try_take("a", 1), Ticket)
    book.release(t1)
    assert isinstance(book.try_take("a", 1), Ticket)


def test_a_node_without_a_budget_is_unlimited_until_it_says_429() -> None:
    clock = FakeClock(100.0)
    book = Budgets([_endpoint("a")], clock=clock)
    for _ in range(30):  # 30 in 0.3 s: no limit
        assert isinstance(book.try_take("a", 1), Ticket)
        clock.advance(0.01)
    assert not book.configured("a")
    book.rate_limited("a")
    learned = book.node("a").rps(clock.t)
    assert learned == pytest.approx(30 * LEARN_CUT)
    assert book.snapshot()["a"]["learned"] is True
    clock.advance(10.0)
    assert book.node("a").rps(clock.t) == pytest.approx(24 * (1 + LEARN_GROWTH_PER_S) ** 10)


def test_a_second_429_cuts_below_the_learned_rate() -> None:
    node = NodeBudget()
    now = 100.0
    for i in range(20):
        node.take(now + i * 0.01, 1)
    node.rate_limited(now + 0.2)
    first = node.learned_rps
    assert first == pytest.approx(16.0)
    node.rate_limited(now + 0.3)  # the same burst's other 429s: no second cut
    assert node.learned_rps == first
    node.rate_limited(now + 1.3)
    grown = first * (1 + LEARN_GROWTH_PER_S) ** 1.1
    assert node.learned_rps == pytest.approx(grown * LEARN_CUT)


def test_adaptive_off_learns_nothing() -> None:
    clock = FakeClock(100.0)
    book = Budgets([_endpoint("a")], clock=clock, adaptive=False)
    book.try_take("a", 1)
    book.rate_limited("a")
    assert book.node("a").rps(clock.t) is None


def test_a_configured_rate_is_never_learned_over() -> None:
    clock = FakeClock(100.0)
    book = Budgets([_endpoint("a", max_rps=5)], clock=clock)
    book.rate_limited("a")
    assert book.node("a").rps(clock.t) == 5.0


def test_learned_rates_survive_a_reload() -> None:
    clock = FakeClock(100.0)
    old = Budgets([_endpoint("a")], clock=clock)
    for _ in range(10):
        old.try_take("a", 1)
    old.rate_limited("a")
    new = Budgets([_endpoint("a"), _endpoint("b")], clock=clock)
    new.inherit(old)
    assert new.node("a").rps(clock.t) == pytest.approx(8.0)
    assert new.node("b").rps(clock.t) is None


def test_heavy_reads_take_at_most_their_lane_per_node() -> None:
    clock = FakeClock(100.0)
    book = Budgets([_endpoint("a")], clock=clock, heavy_per_node=1)
    first = book.try_take("a", 1, heavy=True)
    assert isinstance(first, Ticket) and first.heavy
    assert not isinstance(book.try_take("a", 1, heavy=True), Ticket)  # the lane is full
    assert isinstance(book.try_take("a", 1), Ticket)  # light calls still go
    book.release(first)
    assert isinstance(book.try_take("a", 1, heavy=True), Ticket)


def test_no_heavy_lane_by_default() -> None:
    clock = FakeClock(100.0)
    book = Budgets([_endpoint("a")], clock=clock)
    tickets = [book.try_take("a", 1, heavy=True) for _ in range(5)]
    assert all(isinstance(t, Ticket) and not t.heavy for t in tickets)


def test_a_learned_rate_paces_single_calls_but_never_a_failover_or_a_batch() -> None:
    clock = FakeClock(100.0)
    book = Budgets([_endpoint("a")], clock=clock)
    for _ in range(10):
        book.try_take("a", 1)
    book.rate_limited("a")  # learned: 8 a second
    assert not isinstance(book.try_take("a", 1), Ticket)  # a first attempt waits
    assert isinstance(book.try_take("a", 1, retry=True), Ticket)  # a failover goes
    assert isinstance(book.try_take("a", 20), Ticket)  # a batch is not starved


def test_a_learned_rate_is_forgotten_after_a_quiet_while() -> None:
    clock = FakeClock(100.0)
    book = Budgets([_endpoint("a")], clock=clock)
    for _ in range(10):
        book.try_take("a", 1)
    book.rate_limited("a")
    assert book.node("a").rps(clock.t) is not None
    clock.advance(LEARN_FORGET_S + 1)
    assert book.node("a").rps(clock.t) is None


def test_a_429_at_a_trickle_teaches_no_rate() -> None:
    clock = FakeClock(100.0)
    book = Budgets([_endpoint("a")], clock=clock)
    book.try_take("a", 1)
    book.rate_limited("a")  # one call in the last second: the back-off answers it
    assert book.node("a").rps(clock.t) is None
