"""A node's configured budget in a real redis-server, shared by every proxy:
two processes together never exceed it, a call counts in the window until a
second after it ended (whichever process sent it; on Redis's clock to the
microsecond), calls in flight are leased and given back, and while Redis is
down each process keeps the budget itself."""

from __future__ import annotations

import asyncio
import time

import pytest

from addon.upstream import shared_budgets
from addon.upstream.budgets import WINDOW_S, Budgets, Ticket
from addon.upstream.shared_budgets import SharedBudgets
from common.config import Endpoint, parse_config
from common.config.overrides import with_overrides
from tests.addon.helpers import redis_link
from tests.redis_server import RedisServer


def _book(max_rps: int | None = None, max_concurrency: int | None = None) -> Budgets:
    e = Endpoint(
        url="http://n",
        provider="p",
        kind="node-rpc",
        network="finney",
        id="endpoint-srf-00000000000000aa",
        max_rps=max_rps,
        max_concurrency=max_concurrency,
    )
    return Budgets([e], clock=time.monotonic)


EID = "endpoint-srf-00000000000000aa"


async def _take(book: SharedBudgets, calls: int = 1) -> Ticket | float:
    taken = book.try_take(EID, calls)
    return taken if isinstance(taken, Ticket | float) else await taken


async def test_two_processes_share_one_rate(redis_server: RedisServer) -> None:
    a, b = redis_link(redis_server, timeout_ms=2000), redis_link(redis_server, timeout_ms=2000)
    pa, pb = (
        SharedBudgets(a, _book(max_rps=20), lease_s=5),
        SharedBudgets(b, _book(max_rps=20), lease_s=5),
    )
    results = await asyncio.gather(*(_take(pa if i % 2 else pb) for i in range(60)))
    granted = [r for r in results if isinstance(r, Ticket)]
    assert len(granted) == 20  # one budget for the two, not 20 each
    waits = [r for r in results if not isinstance(r, Ticket)]
    assert all(0 < w <= WINDOW_S for w in waits)  # when the window lets the next in
    await a.close()
    await b.close()


async def test_a_call_counts_until_a_window_after_it_ended(redis_server: RedisServer) -> None:
    a, b = redis_link(redis_server, timeout_ms=2000), redis_link(redis_server, timeout_ms=2000)
    pa = SharedBudgets(a, _book(max_rps=2), lease_s=5)
    pb = SharedBudgets(b, _book(max_rps=2), lease_s=5)
    t1, t2 = await _take(pa), await _take(pa)
    assert isinstance(t1, Ticket) and isinstance(t2, Ticket)
    await asyncio.sleep(0.3)  # slow answers: in flight, the node may read them any time
    assert await _take(pb) == WINDOW_S  # a window after they end, at the soonest
    pa.release(t1)
    pa.release(t2)
    await asyncio.gather(*pa._tasks)  # the ends, told to Redis
    ended_at = time.monotonic()
    wait = await _take(pb)
    assert isinstance(wait, float) and 0 < wait <= WINDOW_S  # counted from the end, not the take
    await asyncio.sleep(max(0.0, ended_at + wait - time.monotonic()) + 0.02)
    assert isinstance(await _take(pb), Ticket)
    await a.close()
    await b.close()


async def test_calls_in_flight_are_leased_and_given_back(redis_server: RedisServer) -> None:
    a, b = redis_link(redis_server, timeout_ms=2000), redis_link(redis_server, timeout_ms=2000)
    pa = SharedBudgets(a, _book(max_concurrency=2), lease_s=5)
    pb = SharedBudgets(b, _book(max_concurrency=2), lease_s=5)
    t1, t2 = await _take(pa), await _take(pb)
    assert isinstance(t1, Ticket) and isinstance(t2, Ticket) and t1.member and t2.member
    assert not isinstance(await _take(pa), Ticket)  # two in flight across the two proxies
    pb.release(t2)
    await asyncio.sleep(0.05)  # the release is sent without waiting for it
    assert isinstance(await _take(pa), Ticket)
    await a.close()
    await b.close()


async def test_a_redis_outage_falls_back_to_the_local_budget(redis_server: RedisServer) -> None:
    link = redis_link(redis_server, timeout_ms=50)
    book = SharedBudgets(link, _book(max_rps=3), lease_s=5)
    assert isinstance(await _take(book), Ticket)
    redis_server.stop()
    results = [await _take(book) for _ in range(6)]
    # this process's own window (it counted the first call too): 2 more, then waits
    assert sum(isinstance(r, Ticket) for r in results) == 2
    await link.close()


async def test_one_of_three_workers_keeps_a_third_of_the_budget_while_redis_is_away(
    redis_server: RedisServer,
) -> None:
    """Each of three workers kept the whole 30/s while Redis was away: the node
    got 45 calls in one second. A worker that knows it is one of three
    (``--workers 3``) keeps 10; one that does not, the whole, as before."""
    link = redis_link(redis_server, timeout_ms=50)
    third = SharedBudgets(link, _book(max_rps=30), lease_s=5, processes=3)
    whole = SharedBudgets(link, _book(max_rps=30), lease_s=5)
    redis_server.stop()
    for book, fits in ((third, 10), (whole, 30)):
        results = [await _take(book) for _ in range(40)]
        assert sum(isinstance(r, Ticket) for r in results) == fits
    await link.close()


def test_the_launchers_worker_count_reaches_the_redis_config() -> None:
    config = parse_config({"redis": {"url": "redis://127.0.0.1:6390/0"}}, env={})
    assert with_overrides(config, processes=3).redis.processes == 3  # type: ignore[union-attr]
    assert with_overrides(config).redis.processes == 1  # type: ignore[union-attr]
    bare = parse_config({}, env={})
    local = with_overrides(bare, redis_url="redis://127.0.0.1:6391/0", processes=2)
    assert local.redis is not None and local.redis.processes == 2


async def test_a_call_ended_is_counted_a_whole_window_on_redis_clock(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node's window is ``(t - 1 s, t]``: the next call may be taken no
    sooner than a whole window after the end Redis recorded, to the
    microsecond. End times cut to whole milliseconds let a call in up to 1 ms
    early, and with the end-to-arrival gaps of a loopback node (about 1 ms) the
    node saw 21 calls within 0.9999 s. A short window keeps the trials quick;
    each release is sent late in a millisecond (the system's clock is Redis's
    on this machine), where a cut end time is the most wrong."""
    window_ms = 40
    monkeypatch.setattr(shared_budgets, "_WINDOW_MS", window_ms)
    link = redis_link(redis_server, timeout_ms=2000)
    book = SharedBudgets(link, _book(max_rps=1), lease_s=5)
    shortest = float("inf")
    ticket = await _take(book)
    for _ in range(25):
        assert isinstance(ticket, Ticket)
        while time.time() % 0.001 < 0.0006:
            pass
        released = time.time()  # before Redis records the end
        book.release(ticket)
        await asyncio.gather(*book._tasks)
        ticket = await _take_soonest(book)
        shortest = min(shortest, time.time() - released)  # after Redis took it
    assert shortest >= window_ms / 1000, shortest
    await link.close()


async def _take_soonest(book: SharedBudgets) -> Ticket:
    """A ticket as soon as Redis gives one: asked again at once near the time it said."""
    while True:
        got = await _take(book)
        if isinstance(got, Ticket):
            return got
        if got > 0.003:
            await asyncio.sleep(got - 0.003)
