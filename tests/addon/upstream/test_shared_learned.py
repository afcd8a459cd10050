"""Learned rates in a real redis-server, shared by every proxy: one process's
429 teaches the other (cut from both processes' calls in the node's window),
one cut per burst whoever reports it, a failover or a batch is never held
back, a 429 at a trickle teaches nothing, and while Redis is down each
process paces the node with the rate it last heard of."""

from __future__ import annotations

import asyncio
import time

import pytest

from addon.upstream.budgets import Budgets, Ticket
from addon.upstream.learning import learned
from addon.upstream.shared_budgets import SharedBudgets
from common.config import Endpoint
from tests.addon.helpers import redis_link
from tests.redis_server import RedisServer

EID = "endpoint-srf-00000000000000bb"


def _book() -> Budgets:
    e = Endpoint(url="http://n", provider="p", kind="node-rpc", network="finney", id=EID)
    return Budgets([e], clock=time.monotonic)


async def _take(book: SharedBudgets, calls: int = 1, retry: bool = False) -> Ticket | float:
    taken = book.try_take(EID, calls, retry=retry)
    return taken if isinstance(taken, Ticket | float) else await taken


async def _taught(book: SharedBudgets) -> bool:
    """A 429 reported; whether a rate paces the node after it (not ``untaught``)."""
    untaught: list[bool] = []
    book.rate_limited(EID, lambda: untaught.append(True))
    await asyncio.gather(*book._tasks)
    return not untaught


async def test_one_proxys_429_teaches_the_other(redis_server: RedisServer) -> None:
    a, b = redis_link(redis_server, timeout_ms=2000), redis_link(redis_server, timeout_ms=2000)
    pa, pb = SharedBudgets(a, _book(), lease_s=5), SharedBudgets(b, _book(), lease_s=5)
    assert pa.learns(EID) and pb.learns(EID)
    # no rate yet: unlimited; 6 calls from each process in the node's window
    tickets = [await _take(p) for p in (pa, pb) for _ in range(6)]
    assert all(isinstance(t, Ticket) for t in tickets)
    assert pb.local.node(EID).learned is None
    assert await _taught(pa)  # a's 429: learnt from the 12 calls of both, not a's 6
    assert pa.local.node(EID).learned_rps == learned.CUT * 12
    # b never saw a 429, and is paced all the same: 12 in the window, over 10.8
    wait = await _take(pb)
    assert isinstance(wait, float) and wait > 0
    # its own copy, from Redis (grown a hair: the call it held back found it full)
    assert pb.local.node(EID).learned_rps == pytest.approx(learned.CUT * 12, rel=0.01)
    # b's 429 in the same burst: no second cut
    assert await _taught(pb)
    assert pb.local.node(EID).learned_rps == pytest.approx(learned.CUT * 12, rel=0.01)
    await a.close()
    await b.close()


async def test_a_failover_or_a_batch_is_never_held_back(redis_server: RedisServer) -> None:
    link = redis_link(redis_server, timeout_ms=2000)
    book = SharedBudgets(link, _book(), lease_s=5)
    for _ in range(10):
        assert isinstance(await _take(book), Ticket)
    assert await _taught(book)  # 9 a second, 10 in the window
    assert not isinstance(await _take(book), Ticket)  # a first attempt is paced
    assert isinstance(await _take(book, retry=True), Ticket)
    assert isinstance(await _take(book, calls=20), Ticket)
    await link.close()


async def test_a_429_at_a_trickle_teaches_no_rate(redis_server: RedisServer) -> None:
    link = redis_link(redis_server, timeout_ms=2000)
    book = SharedBudgets(link, _book(), lease_s=5)
    assert isinstance(await _take(book), Ticket)
    assert not await _taught(book)  # one call in the window: the caller pauses the node
    assert book.local.node(EID).learned is None
    await link.close()


async def test_while_redis_is_down_the_last_rate_heard_paces_locally(
    redis_server: RedisServer,
) -> None:
    link = redis_link(redis_server, timeout_ms=50)
    book = SharedBudgets(link, _book(), lease_s=5)
    for _ in range(10):
        assert isinstance(await _take(book), Ticket)
    assert await _taught(book)
    redis_server.stop()
    results = [await _take(book) for _ in range(5)]
    # this process's window holds its 10 calls, over the 9 a second it heard of
    assert not any(isinstance(r, Ticket) for r in results)
    assert book.local.node(EID).learned_rps == pytest.approx(learned.CUT * 10, rel=0.01)
    await link.close()


async def test_a_full_node_grows_back_quickly_to_below_the_ceiling(
    redis_server: RedisServer,
) -> None:
    """Redis's script grows the rate as ``learned.grow`` does: quickly back
    to one call below the window the cut was taken from, never past it so."""
    link = redis_link(redis_server, timeout_ms=2000)
    book = SharedBudgets(link, _book(), lease_s=5)
    for _ in range(20):
        assert isinstance(await _take(book), Ticket)
    assert await _taught(book)  # 18 a second, the ceiling 20
    node = book.local.node(EID)
    assert node.learned is not None and node.learned.ceiling == 20
    rates = []
    for _ in range(300):  # held back again and again: the node is full
        assert not isinstance(await _take(book), Ticket)
        rates.append(node.learned_rps or 0.0)
        if rates[-1] >= 19:
            break
        await asyncio.sleep(0.01)
    assert rates == sorted(rates) and rates[0] >= 18 * 0.999
    assert rates[-1] == pytest.approx(19)  # the ceiling less one call, and no further
    await link.close()
