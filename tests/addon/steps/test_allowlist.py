"""The allowlist in the pipeline: subscriptions over HTTP are refused, with a reason
a client can act on."""

from __future__ import annotations

from tests.addon.helpers import (
    FakeHub,
    call,
    make,
)


async def test_subscriptions_over_http_stay_refused_by_the_allowlist() -> None:
    from tests.addon.helpers import body, rpc_flow, run

    stages, _, rt = make()
    rt.subs = FakeHub()  # type: ignore[assignment]
    f = await run(stages, rpc_flow(call("chain_subscribeNewHeads")))
    assert f.response.status_code == 403
    assert "WebSocket only" in body(f)["error"]["data"]["reason"]
