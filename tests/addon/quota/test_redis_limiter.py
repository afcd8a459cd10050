"""One quota per client across processes, in a real redis-server on 127.0.0.1 (started
per test, no persistence): the window slides, a batch is taken whole, and while
Redis is down or slow the local limiter answers within the bound."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from tests.addon.helpers import (
    redis_link,
    shared_limiter,
)
from tests.redis_server import RedisServer


async def test_the_101st_call_in_the_window_is_refused_across_two_processes(
    redis_server: RedisServer,
) -> None:
    a, b = redis_link(redis_server), redis_link(redis_server)  # two proxies, one Redis
    la, lb = shared_limiter(a), shared_limiter(b)
    allowed = 0
    for i in range(150):
        d = await (la if i % 2 else lb).check("198.51.100.7")
        allowed += d.allowed
        if not d.allowed:
            assert d.retry_after >= 1 and d.remaining == 0 and d.policy == "100;w=60"
    assert allowed == 100
    other = await la.check("198.51.100.8")  # another client: its own quota
    assert other.allowed and other.remaining == 99
    await a.close()
    await b.close()


async def test_a_batch_is_taken_whole_or_refused_whole(redis_server: RedisServer) -> None:
    link = redis_link(redis_server)
    lim = shared_limiter(link, requests=10)
    assert (await lim.check("c", 7)).remaining == 3
    refused = await lim.check("c", 4)  # needs 4, 3 left: nothing taken
    assert not refused.allowed and refused.remaining == 3
    assert (await lim.check("c", 3)).remaining == 0
    too_big = await lim.check("d", 11)  # more than the whole quota: never fits
    assert not too_big.allowed and too_big.retry_after == 60
    await link.close()


async def test_concurrent_calls_never_exceed_the_quota(redis_server: RedisServer) -> None:
    links = [redis_link(redis_server, timeout_ms=2000) for _ in range(4)]
    lims = [shared_limiter(link) for link in links]
    results = await asyncio.gather(*(lims[i % 4].check("hot") for i in range(400)))
    assert sum(d.allowed for d in results) == 100
    for link in links:
        await link.close()


async def test_the_window_slides_and_headers_say_when(redis_server: RedisServer) -> None:
    link = redis_link(redis_server)
    lim = shared_limiter(link, requests=3, window_s=1.0)
    for _ in range(3):
        assert (await lim.check("w")).allowed
    refused = await lim.check("w")
    assert not refused.allowed and 0 < refused.retry_after_s <= 1.0
    assert 0 < refused.reset_s <= 1.0
    await asyncio.sleep(refused.retry_after_s + 0.05)
    assert (await lim.check("w")).allowed
    probe = await lim.check("w", take=False)  # a WebSocket handshake: asks, takes nothing
    again = await lim.check("w", take=False)
    assert probe.remaining == again.remaining
    ttl = int(redis_server.command("PTTL", lim.key("w")).strip(b":\r\n"))
    assert 0 < ttl <= 1000  # the client's list expires with its window
    await link.close()


async def test_redis_down_falls_back_to_the_local_limiter_without_waiting(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    link = redis_link(redis_server)
    fallbacks: list[str] = []
    link.on_fallback = fallbacks.append
    lim = shared_limiter(link, requests=5)
    assert (await lim.check("x")).allowed
    redis_server.stop()
    with caplog.at_level(logging.WARNING, "chainproxy.redis"):
        start = time.monotonic()
        decision = await lim.check("x")  # the local limiter answers this one
        assert time.monotonic() - start < 1.0  # bounded (the bound is 50 ms; slack for CI)
    assert decision.allowed and decision.remaining == 4  # local: a fresh window
    assert not link.up and fallbacks == ["ratelimit"]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "unavailable" in lines[0] and redis_server.url in lines[0]
    redis_server.start()  # same port
    deadline = time.monotonic() + 10
    while not link.up and time.monotonic() < deadline:  # noqa: ASYNC110 (a poll, bounded)
        await asyncio.sleep(0.1)
    assert link.up  # the watcher found it again by itself
    # shared again: Redis restarted empty (the local limiter, 1 taken, would say 3)
    assert (await lim.check("x")).remaining == 4
    await link.close()


async def test_a_slow_redis_costs_a_request_at_most_the_bound(redis_server: RedisServer) -> None:
    link = redis_link(redis_server, timeout_ms=50)
    lim = shared_limiter(link)
    assert (await lim.check("s")).allowed
    # the connection stalls for 1 s (a blocked server, a long fork, a slow
    # network): a blocking command ahead of the check on the same connection
    # (the test server refuses DEBUG SLEEP: enable-debug-command is off)
    fallbacks: list[str] = []
    link.on_fallback = fallbacks.append
    held = link.pipe.submit("BLPOP", "never", "1")
    start = time.monotonic()
    decision = await lim.check("s")
    waited = time.monotonic() - start
    assert await held is None
    assert decision.allowed and decision.remaining == 99  # from the local limiter
    assert fallbacks == ["ratelimit"]
    assert waited < 0.5  # the bound is 50 ms; never the full second
    await link.close()


async def test_the_decision_is_handed_on_as_the_reply_is_read(redis_server: RedisServer) -> None:
    link = redis_link(redis_server, timeout_ms=2000)
    lim = shared_limiter(link, requests=3)
    order: list[str] = []
    later = lim.later("cb")
    later.then(lambda done: order.append(f"callback {done.result().remaining}"))
    assert not later.done  # one round trip: nothing decided locally

    async def waiter() -> None:
        await later
        order.append("task")

    await asyncio.ensure_future(waiter())
    assert order == ["callback 2", "task"]  # applied before any task woke
    await link.close()


async def test_a_charge_is_sent_without_a_task_and_counts(redis_server: RedisServer) -> None:
    link = redis_link(redis_server, timeout_ms=2000)
    lim = shared_limiter(link, requests=10)
    tasks = len(asyncio.all_tasks())
    lim.charge("bytes", 4)  # the bytes of an answer, after it
    assert len(asyncio.all_tasks()) == tasks
    assert (await lim.check("bytes", take=False)).remaining == 6  # in order, after the charge
    lim.charge("bytes", 50)  # whatever is left: the window is full, not over
    assert (await lim.check("bytes", take=False)).remaining == 0
    await link.close()


async def test_units_given_back_leave_the_shared_window(redis_server: RedisServer) -> None:
    """A call refused after its base price was taken (its heavy read did not
    fit) gets those units back, in Redis as in the local limiter."""
    link = redis_link(redis_server, timeout_ms=2000)
    lim = shared_limiter(link, requests=10)
    assert (await lim.check("r", 4)).remaining == 6
    lim.refund("r", 3)
    assert (await lim.check("r", take=False)).remaining == 9
    lim.refund("r", 50)  # never more than was taken
    assert (await lim.check("r", take=False)).remaining == 10
    await link.close()
    lim.local.check("r", 5)
    lim.refund("r", 2)  # Redis gone: the local limiter's own
    assert lim.local.check("r", take=False).remaining == 7
