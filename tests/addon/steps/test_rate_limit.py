"""The per-client quota in the pipeline: a call over it is a 429 and never forwarded,
and a batch larger than the whole quota is told to split."""

from __future__ import annotations

from addon.pipeline.context import META_KEY
from tests.addon.helpers import (
    body,
    call,
    make,
    rpc_flow,
    run,
)


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
    assert "split it" in body(f)["error"]["data"]["reason"]
    assert fake.seen == []
