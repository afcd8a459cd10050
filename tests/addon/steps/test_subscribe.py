"""Subscribe and unsubscribe go through the same steps as every call (quota, usage
record, metrics) and a batch that mixes them with plain calls is admitted or
refused whole. The hub is a stand-in here; the real hub is tested in
tests/addon/subs/test_hub.py and end to end in tests/e2e/test_subscriptions_e2e.py."""

from __future__ import annotations

from tests.addon.helpers import (
    FakeHub,
    FakeSocket,
    call,
    pipeline_with_hub,
    request_counts,
    ws_message,
)


async def test_a_subscribe_is_charged_recorded_and_counted_like_a_call() -> None:
    hub = FakeHub()
    pipe, rt = pipeline_with_hub(hub)
    sock = FakeSocket()
    rpc, doc = await ws_message(pipe, sock, call("chain_subscribeNewHeads", id_="s"))
    assert doc == {"jsonrpc": "2.0", "id": "s", "result": "sub1"}
    assert sock.subscriptions == {"sub1": "chain_subscribeNewHeads"}
    assert rpc.rate is not None and rpc.rate.remaining == 99  # one unit of the quota
    for after in rpc.afters or ():
        after()
    assert hub.greeted == 1  # the head follows the answer
    (row,) = rt.usage.drain()
    assert row["method"] == "chain_subscribeNewHeads" and row["requests"] == 1
    assert row["endpoint"] == "endpoint-srf-00000000000000aa" and row["errors"] == 0
    assert request_counts(rt) == {("chain_subscribeNewHeads", "ok"): 1}


async def test_unsubscribe_takes_no_quota_and_answers_whether_it_was_yours() -> None:
    hub = FakeHub()
    pipe, _ = pipeline_with_hub(hub)
    sock = FakeSocket()
    await ws_message(pipe, sock, call("chain_subscribeNewHeads"))
    rpc, doc = await ws_message(pipe, sock, call("chain_unsubscribeNewHeads", ["sub1"], id_=2))
    assert doc["result"] is True and hub.unsubscribed == ["sub1"] and not sock.subscriptions
    assert rpc.rate is None  # nothing charged
    _, doc = await ws_message(pipe, sock, call("chain_unsubscribeNewHeads", ["nope"], id_=3))
    assert doc["result"] is False


async def test_an_unsubscribe_of_another_kind_is_false_and_ends_nothing() -> None:
    """As a node's RPC server keeps them (per subscribe/unsubscribe pair): a
    storage id given to chain_unsubscribeNewHeads, or a follow's, stays."""
    hub = FakeHub()
    pipe, _ = pipeline_with_hub(hub)
    sock = FakeSocket()
    await ws_message(pipe, sock, call("state_subscribeStorage", [["0x01"]]))
    sock.subscriptions["follow-1"] = "chainHead_v1_follow"
    for wrong, target in (
        ("chain_unsubscribeNewHeads", "sub1"),
        ("chain_unsubscribeNewHeads", "follow-1"),
    ):
        _, doc = await ws_message(pipe, sock, call(wrong, [target], id_=2))
        assert doc["result"] is False and hub.unsubscribed == []
    assert set(sock.subscriptions) == {"sub1", "follow-1"}
    _, doc = await ws_message(pipe, sock, call("state_unsubscribeStorage", ["sub1"], id_=3))
    assert doc["result"] is True and hub.unsubscribed == ["sub1"]
    # an alias of the same kind is the same kind
    await ws_message(pipe, sock, call("chain_subscribeNewHead", id_=4))
    _, doc = await ws_message(pipe, sock, call("chain_unsubscribeNewHeads", ["sub2"], id_=5))
    assert doc["result"] is True


async def test_a_mixed_batch_is_refused_whole_by_the_quota() -> None:
    hub = FakeHub()
    pipe, rt = pipeline_with_hub(hub, rate_limit={"requests": 3, "window_s": 60})
    sock = FakeSocket()
    batch = [
        call("chain_getHeader", id_=1),
        call("chain_subscribeNewHeads", id_=2),
        call("system_health", id_=3),
        call("chain_subscribeFinalizedHeads", id_=4),
    ]
    rpc, doc = await ws_message(pipe, sock, batch)
    assert rpc.reply is not None and rpc.reply.status == 429
    assert doc["error"]["code"] == -32005 and "4" in doc["error"]["data"]["reason"]
    assert hub.subscribed == [] and sock.subscriptions == {}  # nothing half-done
    assert request_counts(rt) == {
        ("chain_getHeader", "rate_limited"): 1,
        ("chain_subscribeNewHeads", "rate_limited"): 1,
        ("system_health", "rate_limited"): 1,
        ("chain_subscribeFinalizedHeads", "rate_limited"): 1,
    }


async def test_a_mixed_batch_within_the_quota_is_answered_in_order() -> None:
    hub = FakeHub()
    pipe, rt = pipeline_with_hub(hub)
    sock = FakeSocket()
    batch = [
        call("chain_getHeader", id_=1),
        call("chain_subscribeNewHeads", id_=2),
        call("author_submitAndWatchExtrinsic", ["0x00"], id_=3),
    ]
    rpc, doc = await ws_message(pipe, sock, batch)
    assert [d["id"] for d in doc] == [1, 2, 3]
    assert doc[0]["result"] == "chain_getHeader-ok"  # forwarded as usual
    assert doc[1]["result"] == "sub1"
    assert doc[2]["error"]["data"]["policy"] == "allowlist"  # writes stay refused
    assert rpc.rate is not None and rpc.rate.remaining == 98  # two calls admitted, one unit each
    rows = {r["method"]: r["requests"] for r in rt.usage.drain()}
    assert rows == {"chain_getHeader": 1, "chain_subscribeNewHeads": 1}  # refusals: none
    assert request_counts(rt) == {
        ("chain_getHeader", "ok"): 1,
        ("chain_subscribeNewHeads", "ok"): 1,
        ("other", "refused"): 1,  # off the allowlist: one label for all
    }


async def test_no_upstream_for_a_subscription_is_an_error_and_a_usage_record() -> None:
    pipe, rt = pipeline_with_hub(FakeHub(fail=True))
    sock = FakeSocket()
    rpc, doc = await ws_message(pipe, sock, call("chain_subscribeNewHeads"))
    assert doc["error"]["code"] == -32603 and "no upstream" in doc["error"]["message"]
    assert rpc.subscribed == {0: None}
    ((row),) = rt.usage.drain()
    assert row["errors"] == 1 and row["endpoint"] is None
    assert request_counts(rt) == {("chain_subscribeNewHeads", "error"): 1}
