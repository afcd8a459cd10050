"""The link to Redis: a password in its URL never reaches the log; a call by
callback is bounded like an awaited one."""

from __future__ import annotations

import asyncio
import logging

import pytest

from addon.redislink.link import UNAVAILABLE, RedisLink
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
    # the connection is held by a blocking command for 0.3 s: the call behind it
    # is told UNAVAILABLE by its bound, once
    held = link.pipe.submit("BLPOP", "never", "0.3")
    stalled = asyncio.get_running_loop().create_future()
    link.call("cache", ("ECHO", "late"), lambda r: (got.append(r), stalled.set_result(None)))
    await stalled
    assert got[-1] is UNAVAILABLE and fallbacks == ["cache"]
    assert await held is None
    assert await link.pipe.submit("ECHO", "after") == b"after"  # the late reply came first
    assert got == [b"hi", UNAVAILABLE]  # and was dropped
    await link.close()
