"""Subscription limits in the pipeline: the per-socket bound refuses before the quota
is charged."""

from __future__ import annotations

from addon.rpc.jsonrpc import Call
from addon.steps import subscribe as subscribe_step
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


async def test_subscribes_waiting_for_a_node_count_and_are_counted_again() -> None:
    """The bounds count what the socket and its client hold and their
    subscribes still waiting for a node; the subscribe step asks again right
    before it subscribes (a message that waited for a Redis quota may find
    the last place taken by then)."""
    hub = FakeHub()
    pipe, rt = pipeline_with_hub(
        hub, websocket={"max_subscriptions": 2, "max_subscriptions_per_client": 3}
    )
    sock = FakeSocket()
    hub.opening[id(sock)] = 2  # two of this socket's subscribes wait for a node
    _, doc = await ws_message(pipe, sock, call("chain_subscribeNewHeads"))
    assert doc["error"]["data"]["limit"] == 2 and hub.subscribed == []
    del hub.opening[id(sock)]
    hub.client_opening[sock.client] = 3  # its other sockets' do
    _, doc = await ws_message(pipe, sock, call("chain_subscribeNewHeads"))
    assert doc["error"]["data"]["limit"] == 3 and "client" in doc["error"]["message"]
    del hub.client_opening[sock.client]
    rpc, doc = await ws_message(pipe, sock, call("chain_subscribeNewHeads"))
    assert doc["result"] == "sub1"
    hub.opening[id(sock)] = 1  # taken while a message waited past the limits step
    late = await subscribe_step._subscribe(rpc, rt, sock, 0, Call(7, "chain_subscribeAllHeads", []))
    assert late["error"]["data"]["policy"] == "max_subscriptions" and len(hub.subscribed) == 1
    # its price, taken by the quota step before, was given back
    assert rt.quotas.decide(rpc.client, 1, rpc.tier).allowed  # as the quota step takes it
    rpc.item_units = {0: 1}
    left = rt.quotas.decide(rpc.client, 1, rpc.tier, take=False).remaining
    await subscribe_step._subscribe(rpc, rt, sock, 0, Call(8, "chain_subscribeAllHeads", []))
    assert rt.quotas.decide(rpc.client, 1, rpc.tier, take=False).remaining == left + 1
