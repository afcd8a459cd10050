"""A call's way past the nodes' budgets: it takes a node with budget, waits
its fair turn when none has, and gives up with a time to retry (real asyncio,
short real waits)."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from addon.upstream.admission import Admission
from addon.upstream.budgets import PROBE_ROOM, WINDOW_S, Budgets, Ticket
from addon.upstream.fair_wait import FairWait
from addon.upstream.pool import TIER_SYNCED, Upstream, UpstreamPool
from common.config import Endpoint


def _setup(
    *, max_rps: int | None = None, max_concurrency: int | None = None, nodes: int = 1
) -> tuple[UpstreamPool, Budgets, FairWait]:
    ids = [f"endpoint-srf-{i}" for i in range(nodes)]
    ups = [Upstream(id=i, url=f"http://{i}", provider="p", archive=False) for i in ids]
    for u in ups:
        u.tier = TIER_SYNCED
    pool = UpstreamPool(
        ups, eject_after=3, eject_cooldown_s=30, clock=time.monotonic, rng=random.Random(2)
    )
    eps = [
        Endpoint(
            url=f"http://{i}",
            provider="p",
            kind="rpc-http",
            network="finney",
            id=i,
            max_rps=max_rps,
            max_concurrency=max_concurrency,
        )
        for i in ids
    ]
    return pool, Budgets(eps, clock=time.monotonic), FairWait()


def _admission(budgets: Budgets, fair: FairWait, client: str, wait_s: float = 2.0) -> Admission:
    return Admission(budgets, fair, client=client, max_wait_s=wait_s, clock=time.monotonic)


async def _acquire_while_freed(
    a: Admission, pool: UpstreamPool, held: Ticket
) -> tuple[Upstream, Ticket] | None:
    """``a`` acquires while ``held`` is released 0.1 s in, by the same admission."""

    async def finish_later() -> None:
        await asyncio.sleep(0.1)
        a.release(held)

    task = asyncio.create_task(finish_later())
    got = await a.acquire(pool, set(), calls=1, until=time.monotonic() + 5, wait=True)
    await task
    return got


async def test_free_budget_is_taken_at_once() -> None:
    pool, budgets, fair = _setup(max_rps=5)
    a = _admission(budgets, fair, "c")
    got = await a.acquire(pool, set(), calls=1, until=time.monotonic() + 5, wait=True)
    assert got is not None and isinstance(got[1], Ticket)
    assert not a.waited and not a.shed


async def test_spent_budget_is_shed_after_the_wait_with_a_retry_time() -> None:
    pool, budgets, fair = _setup(max_rps=2)
    for _ in range(2):
        assert isinstance(budgets.try_take("endpoint-srf-0", 1), Ticket)
    a = _admission(budgets, fair, "c", wait_s=0.2)
    t0 = time.monotonic()
    got = await a.acquire(pool, set(), calls=1, until=t0 + 5, wait=True)
    waited = time.monotonic() - t0
    assert got is None and a.shed and a.waited
    assert 0.15 <= waited < 1.0  # bounded by max_wait_s, not by the deadline
    assert a.retry_after == 1


async def test_a_call_waits_for_budget_that_frees_within_its_wait() -> None:
    pool, budgets, fair = _setup(max_concurrency=1)
    held = budgets.try_take("endpoint-srf-0", 1)
    assert isinstance(held, Ticket)
    a = _admission(budgets, fair, "c", wait_s=2.0)
    got = await _acquire_while_freed(a, pool, held)
    assert got is not None and a.waited and not a.shed


async def test_a_hedge_never_waits() -> None:
    pool, budgets, fair = _setup(max_concurrency=1)
    assert isinstance(budgets.try_take("endpoint-srf-0", 1), Ticket)
    a = _admission(budgets, fair, "c")
    t0 = time.monotonic()
    assert await a.acquire(pool, set(), calls=1, until=t0 + 5, wait=False) is None
    assert time.monotonic() - t0 < 1.0 and not a.waited  # a wait would last until t0 + 5


async def test_the_next_node_with_budget_is_taken() -> None:
    pool, budgets, fair = _setup(max_concurrency=1, nodes=2)
    first = await _admission(budgets, fair, "c").acquire(
        pool, set(), calls=1, until=time.monotonic() + 5, wait=True
    )
    second = await _admission(budgets, fair, "c").acquire(
        pool, set(), calls=1, until=time.monotonic() + 5, wait=True
    )
    assert first is not None and second is not None
    assert first[0].id != second[0].id


async def test_a_failing_node_is_no_stand_in_for_a_busy_one() -> None:
    """The healthy node is full under its budget, the other failing (ejected):
    a first attempt waits its turn at the healthy one (and is shed with a time
    to retry) rather than go to the failing one, whose error would send it on
    to the healthy one past its limit anyway. A failover may still go there."""
    pool, budgets, fair = _setup(max_concurrency=1, nodes=2)
    healthy, failing = pool.upstreams["endpoint-srf-0"], pool.upstreams["endpoint-srf-1"]
    failing.ejected_until = time.monotonic() + 30
    held = budgets.try_take(healthy.id, 1)
    assert isinstance(held, Ticket)
    a = _admission(budgets, fair, "c", wait_s=0.2)
    got = await a.acquire(pool, set(), calls=1, until=time.monotonic() + 5, wait=True)
    assert got is None and a.shed and a.waited  # waited for the healthy node, then shed
    # the healthy node frees up within the wait: the call goes there
    b = _admission(budgets, fair, "c", wait_s=2.0)
    got = await _acquire_while_freed(b, pool, held)
    assert got is not None and got[0] is healthy
    b.release(got[1])
    # with no healthy node left at all, the failing one is still tried
    del pool.upstreams[healthy.id]
    c = _admission(budgets, fair, "c", wait_s=0.2)
    got = await c.acquire(pool, set(), calls=1, until=time.monotonic() + 5, wait=True)
    assert got is not None and got[0] is failing


def _learned(budgets: Budgets, eid: str, seen: int) -> None:
    """``eid`` answered 429 with ``seen`` calls in its window (all ended now):
    its rate is learned, and they count a window more."""
    for _ in range(seen):
        t = budgets.try_take(eid, 1)
        assert isinstance(t, Ticket)
        budgets.release(t)
    budgets.rate_limited(eid)


async def test_a_node_short_of_room_for_probes_is_passed_over_while_another_has_it() -> None:
    """A node kept at its learned rate leaves the sidecar's probes no room:
    calls go first where ``PROBE_ROOM`` calls stay free under the rate."""
    pool, budgets, fair = _setup(nodes=2)
    busy, other = "endpoint-srf-0", "endpoint-srf-1"
    _learned(budgets, busy, 10)  # 9 a second, 10 in its window: full
    _learned(budgets, other, 10)
    budgets.node(busy).ended.clear()  # its window: 6 calls, 3 free (short of the room)
    for _ in range(6):
        t = budgets.try_take(busy, 1, retry=True)
        assert isinstance(t, Ticket)
    budgets.node(other).ended.clear()  # its window: empty
    for eid, ms in ((busy, 0.1), (other, 50.0)):  # busy the cheaper: p2c would take it
        pool.upstreams[eid].ewma_ms, pool.upstreams[eid].updated_at = ms, time.monotonic()
    got = []
    for _ in range(9 - PROBE_ROOM):
        a = _admission(budgets, fair, "c")
        took = await a.acquire(pool, set(), calls=1, until=time.monotonic() + 5, wait=True)
        assert took is not None
        got.append(took[0].id)
    assert got == [other] * (9 - PROBE_ROOM)  # while it has the room
    # now neither has the room: the whole rate, the least used node first
    # (other: 5 of 9, busy: 6 of 9), not the cheaper
    pool.budget_use = budgets.use
    got = []
    for _ in range(2):
        a = _admission(budgets, fair, "c")
        took = await a.acquire(pool, set(), calls=1, until=time.monotonic() + 5, wait=True)
        assert took is not None and not a.waited
        got.append(took[0].id)
    assert got == [other, busy]  # 6 and 6 of 9 (a tie: the cheaper)
    assert budgets.node(busy).learned_rps == pytest.approx(9.0)  # short of room: no growth


async def test_a_node_without_a_learned_rate_always_has_room() -> None:
    pool, budgets, fair = _setup(nodes=2)
    _learned(budgets, "endpoint-srf-0", 10)  # 9 a second, 10 in its window
    for _ in range(20):
        a = _admission(budgets, fair, "c")
        took = await a.acquire(pool, set(), calls=1, until=time.monotonic() + 5, wait=True)
        assert took is not None and took[0].id == "endpoint-srf-1"


async def test_scarce_capacity_is_shared_round_robin_between_clients() -> None:
    """A client with ten times the calls in line gets no more turns than the other."""
    pool, budgets, fair = _setup(max_concurrency=1)
    order: list[str] = []

    async def call(client: str) -> None:
        a = _admission(budgets, fair, client, wait_s=10.0)
        got = await a.acquire(pool, set(), calls=1, until=time.monotonic() + 20, wait=True)
        assert got is not None
        order.append(client)
        await asyncio.sleep(0.005)  # the upstream call
        a.release(got[1])

    heavy = [asyncio.create_task(call("heavy")) for _ in range(30)]
    await asyncio.sleep(0)  # the heavy client's calls queue first
    light = [asyncio.create_task(call("light")) for _ in range(3)]
    await asyncio.gather(*heavy, *light)
    # the light client's 3 calls are served within the first 8 grants, not after 30
    assert max(i for i, c in enumerate(order) if c == "light") < 8, order


async def test_every_node_backing_off_waits_for_the_first_to_come_back() -> None:
    pool, budgets, fair = _setup(nodes=2)
    for u, pause in zip(pool.upstreams.values(), (0.15, 5.0), strict=True):
        pool.started(u)
        pool.throttled(u, 1, pause, "rate-limited")
    a = _admission(budgets, fair, "c", wait_s=1.0)
    got = await a.acquire(pool, set(), calls=1, until=time.monotonic() + 5, wait=True)
    assert got is not None and got[0].id == "endpoint-srf-0" and a.waited


async def test_backing_off_longer_than_the_wait_sheds_with_its_end() -> None:
    pool, budgets, fair = _setup(nodes=1)
    u = next(iter(pool.upstreams.values()))
    pool.started(u)
    pool.throttled(u, 1, 7.0, "rate-limited")
    a = _admission(budgets, fair, "c", wait_s=0.1)
    got = await a.acquire(pool, set(), calls=1, until=time.monotonic() + 5, wait=True)
    assert got is None and a.shed
    assert a.retry_after == 7


async def test_calls_shed_in_line_behind_others_say_when_the_paused_nodes_are_back() -> None:
    """Every node pauses 7 s at its Retry-After; ten calls arrive together:
    those that waited in line behind the first (never asking a node) are shed
    with the pauses' end too, not a default of 1 s (9 of 10 said 1 s before)."""
    pool, budgets, fair = _setup(nodes=2)
    for u in pool.upstreams.values():
        pool.started(u)
        pool.throttled(u, 1, 7.0, "rate-limited")
    calls = [_admission(budgets, fair, f"c{i}", wait_s=0.1) for i in range(10)]
    got = await asyncio.gather(
        *(a.acquire(pool, set(), calls=1, until=time.monotonic() + 5, wait=True) for a in calls)
    )
    assert got == [None] * 10 and all(a.shed for a in calls)
    assert [a.retry_after for a in calls] == [7] * 10


async def test_open_loop_demands_one_to_ten_get_shares_within_two_times() -> None:
    """Calls arriving at 20/s and 200/s for a node of 20/s, each waiting at most
    2 s: the heavy client's calls expire in line by the hundred, and must not
    cost it its turns (nor win it more than its share). (With 1 s, a stall of
    this process past the wait, two suites side by side, expired every call in
    line at once, and the first calls after it took the budget by their rates.)"""
    pool, budgets, fair = _setup(max_rps=20)
    served = {"light": 0, "heavy": 0}
    # the first window's budget goes to whoever comes first, before anyone
    # waits: capacity is scarce from the second window on, and that is measured
    scarce_from = time.monotonic() + WINDOW_S

    async def one(client: str) -> None:
        a = _admission(budgets, fair, client, wait_s=2.0)
        got = await a.acquire(pool, set(), calls=1, until=time.monotonic() + 5, wait=True)
        if got is not None:
            if time.monotonic() >= scarce_from:
                served[client] += 1
            await asyncio.sleep(0.005)
            a.release(got[1])

    async def offer(client: str, rate: float, seconds: float) -> None:
        tasks, start = [], time.monotonic()
        for i in range(int(rate * seconds)):
            delay = start + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(client)))
        await asyncio.gather(*tasks)

    await asyncio.gather(offer("light", 20, 4.0), offer("heavy", 200, 4.0))
    assert min(served.values()) >= 12, served
    assert max(served.values()) / min(served.values()) <= 2.0, served


def test_a_node_near_its_budget_is_the_dearer_choice() -> None:
    pool, budgets, _ = _setup(max_rps=10, nodes=2)
    pool.budget_use = budgets.use
    for _ in range(9):
        assert isinstance(budgets.try_take("endpoint-srf-0", 1), Ticket)
    picks = [pool.choose(set()).id for _ in range(200)]  # type: ignore[union-attr]
    assert picks.count("endpoint-srf-1") == 200  # p2c: the one with room wins every time
    assert budgets.use("endpoint-srf-0") == 0.9 and budgets.use("endpoint-srf-1") == 0.0


def test_spread_takes_the_least_used_node_not_the_cheaper_of_two() -> None:
    """When no node keeps the probes' room, the calls left over go to the
    node using the least of its budget: spread evenly, not piled on the
    fastest node up to its limit."""
    pool, budgets, _ = _setup(max_rps=10, nodes=3)
    pool.budget_use = budgets.use
    now = time.monotonic()
    for i, ms in enumerate((0.1, 20.0, 40.0)):  # node 0 the fastest
        pool.upstreams[f"endpoint-srf-{i}"].ewma_ms = ms
        pool.upstreams[f"endpoint-srf-{i}"].updated_at = now
    for eid, n in (("endpoint-srf-0", 6), ("endpoint-srf-1", 5), ("endpoint-srf-2", 7)):
        for _ in range(n):
            assert isinstance(budgets.try_take(eid, 1), Ticket)
    assert pool.choose(set(), spread=True).id == "endpoint-srf-1"  # type: ignore[union-attr]
    assert budgets.try_take("endpoint-srf-1", 1)  # 6, 6, 7: a tie, the cheaper
    assert pool.choose(set(), spread=True).id == "endpoint-srf-0"  # type: ignore[union-attr]
    pool.budget_use = None  # no budgets kept: the cheaper of two, as ever
    assert pool.choose(set(), spread=True) is not None


async def test_a_light_call_never_waits_behind_heavy_reads_held_by_the_heavy_lane() -> None:
    """A heavy read waiting for the heavy lane waits in a line of its own: a light
    call behind it goes at once (one line for both made it wait a whole heavy
    answer); the heavy read goes when the lane frees up."""
    pool, _, _ = _setup()
    eps = [Endpoint(url="http://endpoint-srf-0", provider="p", kind="rpc-http",
                    network="finney", id="endpoint-srf-0")]  # fmt: skip
    budgets = Budgets(eps, clock=time.monotonic, heavy_per_node=1)
    light_line, heavy_line = FairWait(), FairWait()
    first = Admission(budgets, heavy_line, client="h1", max_wait_s=2.0, clock=time.monotonic,
                      heavy=True, wake=(light_line,))  # fmt: skip
    until = time.monotonic() + 5
    held = await first.acquire(pool, set(), calls=1, until=until, wait=True)
    assert held is not None  # the node's one heavy place
    second = Admission(budgets, heavy_line, client="h2", max_wait_s=2.0, clock=time.monotonic,
                       heavy=True, wake=(light_line,))  # fmt: skip
    waiting = asyncio.create_task(second.acquire(pool, set(), calls=1, until=until, wait=True))
    await asyncio.sleep(0.05)
    assert heavy_line.busy and not waiting.done()  # the lane is full: it waits
    light = Admission(budgets, light_line, client="l", max_wait_s=2.0, clock=time.monotonic,
                      wake=(heavy_line,))  # fmt: skip
    got = await light.acquire(pool, set(), calls=1, until=until, wait=True)
    assert got is not None and not light.waited  # not behind the heavy one
    light.release(got[1])
    first.release(held[1])  # the lane frees up: the heavy read in line takes it
    second_got = await asyncio.wait_for(waiting, 2)
    assert second_got is not None and second.waited


def test_take_now_is_acquires_first_step_without_a_coroutine() -> None:
    """The common case: nobody waits and the best node has budget now. Anything
    else is None, with nothing taken, and ``acquire`` takes the whole way."""
    pool, budgets, fair = _setup(max_rps=1, nodes=2)
    a = _admission(budgets, fair, "c")
    got = a.take_now(pool, set(), 1)
    assert got is not None and isinstance(got[1], Ticket) and not a.waited
    first = got[0].id
    other = a.take_now(pool, {first}, 1)  # a failover: another node
    assert other is not None and other[0].id != first
    assert a.take_now(pool, set(pool.upstreams), 1) is None  # no node left
    assert a.take_now(pool, set(), 1) is None  # both budgets spent (1 a second)
    fair.waiting += 1  # someone waits its turn: a new call does not overtake
    assert fair.busy and _admission(budgets, fair, "d").take_now(pool, set(), 1) is None
    assert [n.inflight for n in budgets.nodes.values()] == [1, 1]  # only what was returned


def test_take_now_leaves_a_budget_in_redis_to_acquire() -> None:
    class Shared:
        synchronous = False
        adaptive = False

        def try_take(self, *a: object) -> object:
            raise AssertionError("take_now must not start a Redis round trip")

    pool, _, fair = _setup(max_rps=2)
    a = Admission(Shared(), fair, client="c", max_wait_s=1, clock=time.monotonic)  # type: ignore[arg-type]
    assert a.take_now(pool, set(), 1) is None
