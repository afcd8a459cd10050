"""The link to Redis: a password in its URL never reaches the log; a call by
callback is bounded like an awaited one, and the bound is Redis's time: from
when the command left this process, not from when a busy loop turn queued it."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest

from addon.redislink.link import _HARD_CAP_S, UNAVAILABLE, RedisLink
from common.config import RedisConfig
from tests.addon.helpers import (
    shared_limiter,
)
from tests.redis_server import RedisServer


async def test_the_password_never_reaches_the_log(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"redis://:hunter2-secret@127.0.0.1:{redis_server.port}/0"
    link = RedisLink(
        RedisConfig(url=url, key_prefix="p:", safe_url=f"redis://127.0.0.1:{redis_server.port}/0")
    )
    lim = shared_limiter(link)
    with caplog.at_level(logging.DEBUG):
        await lim.check("z")  # AUTH fails on a server without a password: an error
        redis_server.stop()
        await lim.check("z")
    assert caplog.records and not any("hunter2" in r.getMessage() for r in caplog.records)
    await link.close()


async def test_call_answers_by_callback_within_the_bound_and_drops_a_late_reply(
    redis_server: RedisServer,
) -> None:
    link = RedisLink(
        RedisConfig(url=redis_server.url, key_prefix="b:", timeout_ms=50, safe_url="r")
    )
    fallbacks: list[str] = []
    link.on_fallback = fallbacks.append
    got: list[object] = []
    first = asyncio.get_running_loop().create_future()
    link.call("cache", ("ECHO", "hi"), lambda r: (got.append(r), first.set_result(None)))
    await first
    assert got == [b"hi"] and fallbacks == []
    # the connection is held by a blocking command past the hard cap: the call
    # behind it is told UNAVAILABLE by its bound, once (however late a loaded
    # machine runs its timer, the cap ends the wait before the reply)
    held = link.pipe.submit("BLPOP", "never", str(_HARD_CAP_S + 0.5))
    stalled = asyncio.get_running_loop().create_future()
    link.call("cache", ("ECHO", "late"), lambda r: (got.append(r), stalled.set_result(None)))
    await stalled
    assert got[-1] is UNAVAILABLE and fallbacks == ["cache"]
    assert await held is None
    assert await link.pipe.submit("ECHO", "after") == b"after"  # the late reply came first
    assert got == [b"hi", UNAVAILABLE]  # and was dropped
    await link.close()


def _busy_until(loop: asyncio.AbstractEventLoop, when: float) -> None:
    """One loop turn that lasts until ``when``: what a burst of requests does."""
    while loop.time() < when:
        pass


# Redis answers after 5 ms of its own time: never within the loop turn that wrote it
_SLOW_ECHO = """
local t = redis.call('TIME')
local start = t[1] * 1000000 + t[2]
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - start >= 5000
return ARGV[1]
"""


async def test_a_command_written_only_as_its_bound_is_due_gets_the_whole_bound(
    redis_server: RedisServer,
) -> None:
    # A burst fills one loop turn: the call queued in it is written to Redis at
    # the start of the next turn, and its timer, due in the meantime, fires in
    # that same turn (on time: not late enough to say the loop was busy). Redis
    # has had no time at all; the bound starts when the command left.
    link = RedisLink(RedisConfig(url=redis_server.url, key_prefix="w:", timeout_ms=100))
    fallbacks: list[str] = []
    link.on_fallback = fallbacks.append
    loop = asyncio.get_running_loop()
    warm = loop.create_future()
    link.call("cache", ("ECHO", "warm"), warm.set_result)
    assert await warm == b"warm"  # connected, nothing in flight
    got: list[object] = []
    second = loop.create_future()
    link.call("cache", ("ECHO", "first"), got.append)  # idle: written at once
    slow = ("EVAL", _SLOW_ECHO, 0, "second")  # behind it: written at the next turn
    link.call("cache", slow, lambda r: (got.append(r), second.set_result(None)))
    _busy_until(loop, loop.time() + link.timeout_s + 0.001)  # that turn is after its due time
    await second
    assert got == [b"first", b"second"] and fallbacks == []
    await link.close()


async def test_a_call_queued_while_connecting_is_bounded_by_redis_time() -> None:
    # A connect nobody answers (the SYN dropped: a listener with a full backlog)
    # is Redis's time: the call waiting for it is given up at its own bound,
    # the connect still under way.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = socket.create_connection(("127.0.0.1", port), timeout=2)  # fills the backlog
    link = RedisLink(RedisConfig(url=f"redis://127.0.0.1:{port}/0", timeout_ms=50))
    link.pipe.connect_timeout_s = 30.0  # read as the connect starts: it outlasts the test
    try:
        answer = asyncio.get_running_loop().create_future()
        link.call("ratelimit", ("PING",), answer.set_result)
        assert await answer is UNAVAILABLE
        assert not link.pipe.connected and link.pipe._connecting is not None
        assert not link.pipe._connecting.done()
    finally:
        await link.close()
        filler.close()
        listener.close()


async def test_an_awaited_run_is_bounded_by_timeout_ms_on_an_idle_loop(
    redis_server: RedisServer,
) -> None:
    """``run`` (the shared budgets, socket slots, cache purges): a Redis that
    holds the reply (a SIGSTOPped server: here a blocking command ahead of it)
    ends the call at ``timeout_ms``, not never. Its deadline was once taken as
    a delay from now: about one uptime away, so an idle loop waited forever."""
    from addon.redislink.link import RedisUnavailable

    link = RedisLink(
        RedisConfig(url=redis_server.url, key_prefix="r:", timeout_ms=50, safe_url="r")
    )
    assert await link.run("budgets", lambda: link.pipe.submit("ECHO", "up")) == b"up"
    held = link.pipe.submit("BLPOP", "never", "3")  # the connection answers nothing for 3 s
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(RedisUnavailable):
        await link.run("budgets", lambda: link.pipe.submit("ECHO", "stuck"))
    assert loop.time() - started < _HARD_CAP_S  # the bound (50 ms, or the cap when loaded)
    held.cancel()
    await link.close()


async def test_a_full_redis_stays_down_until_it_takes_writes_again(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A Redis at its ``maxmemory`` (noeviction) answers PING and refuses every
    write: the link is down until a write works, with one line each way (it
    went up and down again every second, saying "shared again" while not)."""
    from addon.redislink.link import RedisUnavailable

    link = RedisLink(
        RedisConfig(url=redis_server.url, key_prefix="f:", timeout_ms=50, safe_url="r")
    )
    redis_server.command("CONFIG", "SET", "maxmemory", "1")  # full: every write refused
    try:
        with caplog.at_level(logging.WARNING):
            while link.up:
                with pytest.raises(RedisUnavailable):
                    await link.run("quota", lambda: link.pipe.submit("SET", "f:k", "v"))
            await asyncio.sleep(2.5)  # two of the watcher's looks: still full
            assert not link.up
            redis_server.command("CONFIG", "SET", "maxmemory", "0")
            for _ in range(40):
                if link.up:
                    break
                await asyncio.sleep(0.1)
            assert link.up
        lines = [r.getMessage() for r in caplog.records]
        assert sum("unavailable" in m for m in lines) == 1
        assert sum("answers again: the quota" in m for m in lines) == 1
    finally:
        redis_server.command("CONFIG", "SET", "maxmemory", "0")
        await link.close()
