"""The per-client quota in the pipeline: a call over it is a 429 and never forwarded,
and a batch larger than the whole quota is told to split; shared in a real
redis-server, the same refusal, and the local quota while Redis is down."""

from __future__ import annotations

from typing import Any

from addon.pipeline.context import META_KEY
from tests.addon.helpers import (
    body,
    call,
    make,
    redis_link,
    rpc_flow,
    run,
)
from tests.redis_server import RedisServer


async def test_rate_limited_flow_is_429_and_not_forwarded() -> None:
    stages, fake, _ = make(rate_limit={"requests": 2, "window_s": 60})
    for _ in range(2):
        await run(stages, rpc_flow(call("system_health")))
    f = await run(stages, rpc_flow(call("system_health", id_=3)))
    assert f.response.status_code == 429
    assert body(f)["error"]["data"]["retry_after"] == int(f.response.headers["Retry-After"])
    assert f.metadata[META_KEY]["outcome"] == "refused" and f.marked == ":no_entry:"
    assert len(fake.seen) == 2


async def test_batch_larger_than_the_whole_quota_says_split_it() -> None:
    stages, fake, _ = make(rate_limit={"requests": 3, "window_s": 60})
    f = await run(stages, rpc_flow([call("system_health", id_=i) for i in range(5)]))
    assert f.response.status_code == 429
    error = body(f)["error"]
    assert "split it" in error["data"]["reason"]
    # what a client needs to tell it never fits: the cost above the whole quota
    assert error["data"]["cost"] == 5 > error["data"]["limit"] == 3
    assert error["message"] == "rate limit exceeded: 3 units per 60s"  # units, not requests
    assert fake.seen == []


# -- the quota in Redis: decided by its script, applied by callback -----------------------


def _shared(server: RedisServer, requests: int) -> tuple[list[Any], Any, Any, Any]:
    stages, fake, rt = make(rate_limit={"requests": requests, "window_s": 60})
    link = redis_link(server, timeout_ms=2000)
    rt.quotas.use_redis(link)
    return stages, fake, rt, link


async def test_the_shared_quota_refuses_with_the_same_contract_across_proxies(
    redis_server: RedisServer,
) -> None:
    a, fake_a, rt_a, link_a = _shared(redis_server, 2)
    b, fake_b, _, link_b = _shared(redis_server, 2)  # a second proxy, the same Redis
    first = await run(a, rpc_flow(call("system_health")))
    assert first.response.status_code == 200
    assert first.response.headers["X-RateLimit-Remaining"] == "1"
    assert (await run(b, rpc_flow(call("system_health")))).response.status_code == 200
    f = await run(a, rpc_flow(call("system_health", id_=3)))
    assert f.response.status_code == 429
    error = body(f)["error"]
    assert error["data"]["policy"] == "2;w=60" and error["data"]["remaining"] == 0
    assert error["data"]["retry_after"] == int(f.response.headers["Retry-After"]) >= 1
    assert f.metadata[META_KEY]["outcome"] == "refused"
    assert len(fake_a.seen) == 1 and len(fake_b.seen) == 1  # the refused call went nowhere
    key = rt_a.quotas.shared[None].key(first.client_conn.peername[0])
    assert redis_server.command("LLEN", key) == b":2\r\n"  # Redis decided: 2 in its window
    await link_a.close()
    await link_b.close()


async def test_redis_down_the_local_quota_answers_and_the_call_goes_on(
    redis_server: RedisServer,
) -> None:
    stages, fake, _, link = _shared(redis_server, 5)
    fallbacks: list[str] = []
    link.on_fallback = fallbacks.append
    assert (await run(stages, rpc_flow(call("system_health")))).response.status_code == 200
    redis_server.stop()
    f = await run(stages, rpc_flow(call("system_health")))
    assert f.response.status_code == 200  # the local limiter decided (its own window)
    assert f.response.headers["X-RateLimit-Remaining"] == "4"
    assert not link.up and fallbacks == ["ratelimit"]
    f = await run(stages, rpc_flow(call("system_health")))  # the link is down: no wait at all
    assert f.response.status_code == 200 and fallbacks == ["ratelimit", "ratelimit"]
    assert len(fake.seen) == 3
    await link.close()
