"""Subscription limits in the pipeline: the per-socket bound refuses before the quota
is charged."""

from __future__ import annotations

from tests.addon.helpers import (
    FakeHub,
    FakeSocket,
    call,
    pipeline_with_hub,
    request_counts,
    ws_message,
)


async def test_subscription_policies_refuse_before_the_quota() -> None:
    pipe, rt = pipeline_with_hub(FakeHub(serves=False))
    sock = FakeSocket()
    rpc, doc = await ws_message(pipe, sock, call("chain_subscribeNewHeads"))
    assert doc["error"]["data"]["policy"] == "subscriptions" and rpc.rate is None

    pipe, rt = pipeline_with_hub(FakeHub(), websocket={"max_subscriptions": 1})
    sock = FakeSocket()
    batch = [call("chain_subscribeNewHeads", id_=1), call("chain_subscribeAllHeads", id_=2)]
    rpc, doc = await ws_message(pipe, sock, batch)
    assert doc[0]["result"] == "sub1"
    assert doc[1]["error"]["data"] == {
        "policy": "max_subscriptions",
        "reason": "unsubscribe some, or open another socket",
        "limit": 1,
    }
    assert rpc.rate is not None and rpc.rate.remaining == 99  # only the one admitted
    assert request_counts(rt)[("chain_subscribeAllHeads", "refused")] == 1
