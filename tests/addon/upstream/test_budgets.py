"""A node's budget: an exact sliding second as the node counts it (a call
counts from taking budget until a second after its answer), calls in flight,
and a rate learned from its 429s (cut, then grown slowly)."""

from __future__ import annotations

import bisect
import heapq
import itertools
import random
from collections.abc import Callable

import pytest

from addon.runtime import Runtime
from addon.upstream.budgets import (
    PROBE_CALLS,
    PROBE_REQUESTS,
    PROBE_ROOM,
    WINDOW_S,
    Budgets,
    NodeBudget,
    Ticket,
)
from addon.upstream.learning import learned
from common.config import Endpoint, parse_config
from sidecar.probing.horizon import STATE_CHECKS
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


def _arrivals_at_the_node(
    book: Budgets,
    clock: FakeClock,
    delay: Callable[[int], float],
    *,
    seconds: float = 4.0,
    answer_s: float = 0.005,
) -> list[float]:
    """Offered 100 calls a second to node ``a`` for ``seconds``; the ``i``-th
    call sent reaches the node ``delay(i)`` after it took budget (the proxy's
    loop, a connection, the network, the node's own loop: what the proxy
    cannot see), the node answers ``answer_s`` later and the ticket is
    released when the answer is back. The times the node read each call."""
    events: list[tuple[float, int, Ticket | None]] = []  # (time, order, ticket to release)
    order = itertools.count()
    for k in range(round(seconds * 100)):
        heapq.heappush(events, (clock.t + k * 0.01, next(order), None))
    arrivals: list[float] = []
    while events:
        t, _, ticket = heapq.heappop(events)
        clock.t = t
        if ticket is not None:
            book.release(ticket)
            continue
        taken = book.try_take("a", 1)
        if isinstance(taken, Ticket):
            arrived = t + delay(len(arrivals))
            arrivals.append(arrived)
            heapq.heappush(events, (arrived + answer_s, next(order), taken))
    return sorted(arrivals)


def _most_in_a_second(arrivals: list[float]) -> int:
    """The most calls in any window ``(t - 1, t]``, as the node counts them."""
    return max(
        bisect.bisect_right(arrivals, t) - bisect.bisect_right(arrivals, t - 1.0) for t in arrivals
    )


def test_never_more_than_max_rps_in_any_second_at_the_node() -> None:
    clock = FakeClock(100.0)
    book = Budgets([_endpoint("a", max_rps=20)], clock=clock)
    arrivals = _arrivals_at_the_node(book, clock, lambda i: 0.001)
    assert len(arrivals) >= 60  # ~20 a second were sent
    assert _most_in_a_second(arrivals) == 20


def test_a_call_delayed_on_its_way_still_counts_in_the_nodes_second() -> None:
    """The first second's calls reach the node 250 ms late (a stalled event
    loop, at the proxy or at the node: measured at the node under load, up to
    225 ms), the later ones at once. Counted from the moment budget was taken,
    calls sent 1.1 s after the first ones arrived 0.85 s after them: 35 in
    one second at the node. Counted until their answer and a second more, 20."""
    clock = FakeClock(100.0)
    book = Budgets([_endpoint("a", max_rps=20)], clock=clock)
    arrivals = _arrivals_at_the_node(book, clock, lambda i: 0.25 if i < 20 else 0.0)
    assert _most_in_a_second(arrivals) <= 20


@pytest.mark.parametrize("seed", range(5))
def test_any_delays_on_the_way_keep_the_nodes_second_within_budget(seed: int) -> None:
    rng = random.Random(seed)
    clock = FakeClock(100.0)
    book = Budgets([_endpoint("a", max_rps=20)], clock=clock)
    arrivals = _arrivals_at_the_node(book, clock, lambda i: rng.uniform(0.0, 0.3))
    assert len(arrivals) >= 45  # 20 per 1 s + the answer's time: budget is not left idle
    assert _most_in_a_second(arrivals) <= 20


def test_refusal_says_when_the_calls_will_fit() -> None:
    clock = FakeClock(100.0)
    book = Budgets([_endpoint("a", max_rps=2)], clock=clock)
    first = book.try_take("a", 1)
    assert isinstance(first, Ticket)
    clock.advance(0.1)
    book.release(first)  # answered at 100.1: counts until 101.1
    clock.advance(0.2)
    second = book.try_take("a", 1)
    assert isinstance(second, Ticket)
    book.release(second)
    assert book.try_take("a", 1) == pytest.approx(WINDOW_S - 0.2)  # when the first leaves
    assert book.try_take("a", 2) == pytest.approx(WINDOW_S)  # a batch of 2: both must leave


def test_a_call_in_flight_counts_until_a_window_after_it_ends() -> None:
    clock = FakeClock(100.0)
    book = Budgets([_endpoint("a", max_rps=1)], clock=clock)
    ticket = book.try_take("a", 1)
    assert isinstance(ticket, Ticket)
    clock.advance(5.0)  # a slow answer: the node may read the call at any moment
    assert book.try_take("a", 1) == pytest.approx(WINDOW_S)  # a window from its end, at best
    book.release(ticket)
    clock.advance(WINDOW_S - 0.01)
    assert not isinstance(book.try_take("a", 1), Ticket)
    clock.advance(0.01)
    assert isinstance(book.try_take("a", 1), Ticket)


def test_a_batch_counts_its_calls_and_one_larger_than_the_budget_goes_alone() -> None:
    clock = FakeClock(100.0)
    book = Budgets([_endpoint("a", max_rps=10)], clock=clock)
    batch = book.try_take("a", 6)
    assert isinstance(batch, Ticket) and batch.calls == 6
    assert not isinstance(book.try_take("a", 6), Ticket)
    book.release(batch)
    assert not isinstance(book.try_take("a", 6), Ticket)  # its 6 calls count a window more
    clock.advance(WINDOW_S)
    big = book.try_take("a", 50)
    assert isinstance(big, Ticket)  # empty window: sent alone
    assert not isinstance(book.try_take("a", 1), Ticket)
    book.release(big)
    assert not isinstance(book.try_take("a", 1), Ticket)


def test_a_configured_budget_leaves_room_for_the_sidecars_probes() -> None:
    """The sidecar probes the same URLs outside these budgets: the runtime's
    books leave its probes' calls and requests out of every configured budget."""
    url = "http://127.0.0.1:9"
    config = parse_config(
        {
            "proxy": {"networks": ["finney"]},
            "registry": {
                "endpoints": [
                    {"url": url, "provider": "p", "kind": "node-rpc", "network": "finney"}
                    | {"max_rps": 20, "max_concurrency": 8}
                ]
            },
        },
        env={},
    )
    rt = Runtime.build(config, clock=FakeClock(100.0))
    assert rt.local_budgets is not None
    node = rt.local_budgets.node(config.endpoints[0].id)
    assert (node.max_rps, node.max_concurrency) == (20 - PROBE_CALLS, 8 - PROBE_REQUESTS)
    # a full probe, its state checks (a hash and a storage read per block) and a head probe
    assert (PROBE_CALLS, PROBE_REQUESTS) == (7 + 2 * STATE_CHECKS + 4, 2)
    small = Budgets(
        [_endpoint("a", max_rps=5, max_concurrency=1), _endpoint("b")],
        clock=FakeClock(100.0),
        leave_for_probes=True,
    )
    assert (small.node("a").max_rps, small.node("a").max_concurrency) == (1, 1)  # never 0
    assert small.node("b").rps(100.0) is None  # no budget: nothing to leave room in


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
    assert not book.configured("a") and book.learns("a")
    book.rate_limited("a")
    assert book.node("a").rps(clock.t) == pytest.approx(30 * learned.CUT)
    assert book.snapshot()["a"]["learned"] is True
    clock.advance(10.0)  # nobody asked: a node that is not full does not grow
    assert book.node("a").rps(clock.t) == pytest.approx(30 * learned.CUT)


def test_a_learned_rate_paces_an_upstream_batch_whole_not_a_clients_batch() -> None:
    """An upstream batch (``whole``: it can go call by call) is counted whole
    against a learned rate and held back when it does not fit; a client's own
    batch, which cannot be split, is never held back by a guess."""
    clock = FakeClock(100.0)
    book = Budgets([_endpoint("a")], clock=clock)
    taken = [book.try_take("a", 1) for _ in range(10)]
    book.rate_limited("a")  # 9 a second, 10 used in the last second
    clock.advance(0.5)
    taken.append(book.try_take("a", 4))
    assert isinstance(taken[-1], Ticket)  # a client's batch: through
    assert not isinstance(book.try_take("a", 4, whole=True), Ticket)  # no room now
    for t in taken:
        assert isinstance(t, Ticket)
        book.release(t)
    clock.advance(5.0)  # the window empty again: room for 4 of 9
    assert isinstance(book.try_take("a", 4, whole=True), Ticket)
    assert not isinstance(book.try_take("a", 6, whole=True), Ticket)  # 4 + 6 > 9


def test_a_full_node_probes_upward_slowly() -> None:
    clock = FakeClock(100.0)
    book = Budgets([_endpoint("a")], clock=clock)
    for _ in range(10):
        book.try_take("a", 1)
    book.rate_limited("a")  # 9 a second
    assert book.node("a").rps(clock.t) == pytest.approx(9.0)
    for _ in range(20):  # held back every 0.1 s for 2 s: full
        clock.advance(0.1)
        assert not isinstance(book.try_take("a", 1), Ticket)
    step = max(learned.MIN_STEP_PER_S, 9.0 * learned.GROW_PER_S)
    assert book.node("a").rps(clock.t) == pytest.approx(9.0 + 2 * step, rel=0.01)


def test_a_second_429_cuts_below_the_learned_rate() -> None:
    node = NodeBudget()
    now = 100.0
    for i in range(20):
        node.take(now + i * 0.01, 1)
    node.rate_limited(now + 0.2)
    first = node.learned_rps
    assert first == pytest.approx(20 * learned.CUT)
    node.rate_limited(now + 0.3)  # the same burst's other 429s: no second cut
    assert node.learned_rps == first
    node.rate_limited(now + 1.3)  # 20 still in flight, above the rate: cut from the rate
    assert node.learned_rps == pytest.approx(first * learned.CUT)


def test_a_429_without_a_rate_pacing_the_node_says_so() -> None:
    clock = FakeClock(100.0)
    book = Budgets([_endpoint("a")], clock=clock)
    untaught: list[str] = []
    book.try_take("a", 1)
    book.rate_limited("a", lambda: untaught.append("a"))  # a trickle: pause it
    assert untaught == ["a"]
    for _ in range(10):
        book.try_take("a", 1)
    book.rate_limited("a", lambda: untaught.append("again"))  # a rate paces it now
    assert untaught == ["a"]


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
    assert new.node("a").rps(clock.t) == pytest.approx(10 * learned.CUT)
    assert new.node("b").rps(clock.t) is None


def test_calls_in_flight_across_a_reload_end_into_the_new_book() -> None:
    clock = FakeClock(100.0)
    old = Budgets([_endpoint("a", max_rps=1, max_concurrency=1)], clock=clock)
    ticket = old.try_take("a", 1)
    assert isinstance(ticket, Ticket)
    new = Budgets([_endpoint("a", max_rps=2, max_concurrency=1)], clock=clock)
    new.inherit(old)
    assert not isinstance(new.try_take("a", 1), Ticket)  # the old book's call is in flight
    old.release(ticket)  # it ends into the old book: the new one knows
    assert new.node("a").inflight == 0
    assert isinstance(new.try_take("a", 1), Ticket)  # the new limit: 2 a second
    assert not isinstance(new.try_take("a", 1), Ticket)  # (1 in flight)


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
    book.rate_limited("a")  # learned: 9 a second
    assert not isinstance(book.try_take("a", 1), Ticket)  # a first attempt waits
    assert isinstance(book.try_take("a", 1, retry=True), Ticket)  # a failover goes
    assert isinstance(book.try_take("a", 20), Ticket)  # a batch is not starved


def test_room_under_a_learned_rate_is_kept_without_growing_the_rate() -> None:
    """``room``: a paced call fits only with that many calls of the learned
    rate free after it; a node short of that room is not full (no growth),
    and the room's wait says when the oldest call leaves the window."""
    clock = FakeClock(100.0)
    book = Budgets([_endpoint("a")], clock=clock)
    for _ in range(10):
        t = book.try_take("a", 1)
        assert isinstance(t, Ticket)
        book.release(t)
    book.rate_limited("a")  # learned: 9 a second, from the 10 in the window
    node = book.node("a")
    clock.advance(WINDOW_S + 0.1)  # the window empties
    assert node.recent(clock.t) == 0
    taken = [book.try_take("a", 1, room=PROBE_ROOM) for _ in range(9)]
    assert all(isinstance(t, Ticket) for t in taken[: 9 - PROBE_ROOM])  # 5 leave 4 free
    short = taken[9 - PROBE_ROOM]
    assert isinstance(short, float) and short == pytest.approx(WINDOW_S)  # all in flight
    assert node.learned_rps == pytest.approx(9.0)  # short of room is not full: no growth
    for _ in range(PROBE_ROOM):  # without room: the whole rate
        assert isinstance(book.try_take("a", 1), Ticket)
    assert not isinstance(book.try_take("a", 1), Ticket)  # full: now it grows
    assert node.learned_rps is not None and node.learned_rps > 9.0


def test_room_is_a_learned_rates_alone() -> None:
    """A node without a rate, a configured rate (its probes' room is set
    aside already), a failover and a batch are not held back by ``room``."""
    clock = FakeClock(100.0)
    book = Budgets([_endpoint("a"), _endpoint("c", max_rps=5)], clock=clock)
    assert all(isinstance(book.try_take("a", 1, room=PROBE_ROOM), Ticket) for _ in range(10))
    assert all(isinstance(book.try_take("c", 1, room=PROBE_ROOM), Ticket) for _ in range(5))
    book.rate_limited("a")  # 9 a second, 10 in the window
    assert isinstance(book.try_take("a", 1, retry=True, room=PROBE_ROOM), Ticket)
    assert isinstance(book.try_take("a", 3, room=PROBE_ROOM), Ticket)


def test_a_learned_rate_is_forgotten_after_a_quiet_while() -> None:
    clock = FakeClock(100.0)
    book = Budgets([_endpoint("a")], clock=clock)
    for _ in range(10):
        book.try_take("a", 1)
    book.rate_limited("a")
    assert book.node("a").rps(clock.t) is not None
    clock.advance(learned.FORGET_S + 1)
    assert book.node("a").rps(clock.t) is None


def test_a_429_at_a_trickle_teaches_no_rate() -> None:
    clock = FakeClock(100.0)
    book = Budgets([_endpoint("a")], clock=clock)
    book.try_take("a", 1)
    book.rate_limited("a")  # one call in the last second: the back-off answers it
    assert book.node("a").rps(clock.t) is None
