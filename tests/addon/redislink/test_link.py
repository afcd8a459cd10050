"""The link to Redis: a password in its URL never reaches the log."""

from __future__ import annotations

import logging

import pytest

from addon.redislink.link import RedisLink
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
