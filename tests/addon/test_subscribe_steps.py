"""Subscribe and unsubscribe go through the same steps as every call
(allowlist, quota, usage record, metrics) and a batch that mixes them with
plain calls is admitted or refused whole. The hub is a stand-in here (one
unit); real upstream subscriptions are tested in tests/e2e/test_subscriptions_e2e.py."""

from __future__ import annotations

import json
from typing import Any

from addon.pipeline.context import RpcContext
from addon.pipeline.runner import RpcPipeline
from addon.runtime import RuntimeHolder
from addon.subs.hub import NoUpstream
from tests.addon.test_stages import call, make


class Hub:
    """Stands in for ``SubscriptionHub``: one shared subscription per call."""

    def __init__(self, *, serves: bool = True, fail: bool = False) -> None:
        self._serves, self._fail = serves, fail
        self.subscribed: list[tuple[str, list[Any]]] = []
        self.unsubscribed: list[str] = []
        self.greeted = 0

    def serves(self, network: str) -> bool:
        return self._serves

    async def subscribe(self, network: str, kind: Any, params: list[Any], send: Any, owner: Any):
        if self._fail:
            raise NoUpstream("nobody")
        self.subscribed.append((kind.subscribe, params))
        hub = self

        class Shared:
            upstream = type("U", (), {"id": "endpoint-srf-00000000000000aa"})()

            def greet(self, sub: Any) -> None:
                hub.greeted += 1

        sub = type("S", (), {"sub_id": f"sub{len(self.subscribed)}"})()
        return Shared(), sub

    def unsubscribe(self, sub_id: str, owner: Any) -> bool:
        self.unsubscribed.append(sub_id)
        return True


class Sock:
    def __init__(self, client: str = "198.51.100.7") -> None:
        self.network, self.client = "finney", client
        self.subscriptions: dict[str, str] = {}
        self.sent: list[bytes] = []
        self.live = True

    def send(self, body: bytes) -> None:
        self.sent.append(body)

    def changed(self) -> None:
        pass


def setup(hub: Hub, **proxy: Any) -> tuple[RpcPipeline, Any]:
    _, _, rt = make(**proxy)
    rt.subs = hub  # type: ignore[assignment]
    holder = RuntimeHolder()
    holder.runtime = rt
    return RpcPipeline(holder), rt


async def send(pipe: RpcPipeline, sock: Sock, doc: Any) -> tuple[RpcContext, Any]:
    rpc = await pipe.message(json.dumps(doc).encode(), sock, sock)
    assert rpc.reply is not None
    return rpc, rpc.reply.doc


def requests(rt: Any) -> dict[tuple[str, str], int]:
    return {(m, o): n for (_net, m, o), n in rt.metrics._requests.items()}


async def test_a_subscribe_is_charged_recorded_and_counted_like_a_call() -> None:
    hub = Hub()
    pipe, rt = setup(hub)
    sock = Sock()
    rpc, doc = await send(pipe, sock, call("chain_subscribeNewHeads", id_="s"))
    assert doc == {"jsonrpc": "2.0", "id": "s", "result": "sub1"}
    assert sock.subscriptions == {"sub1": "chain_subscribeNewHeads"}
    assert rpc.rate is not None and rpc.rate.remaining == 99  # one unit of the quota
    for after in rpc.afters or ():
        after()
    assert hub.greeted == 1  # the head follows the answer
    (row,) = rt.usage.drain()
    assert row["method"] == "chain_subscribeNewHeads" and row["requests"] == 1
    assert row["endpoint"] == "endpoint-srf-00000000000000aa" and row["errors"] == 0
    assert requests(rt) == {("chain_subscribeNewHeads", "ok"): 1}


async def test_unsubscribe_takes_no_quota_and_answers_whether_it_was_yours() -> None:
    hub = Hub()
    pipe, _ = setup(hub)
    sock = Sock()
    await send(pipe, sock, call("chain_subscribeNewHeads"))
    rpc, doc = await send(pipe, sock, call("chain_unsubscribeNewHeads", ["sub1"], id_=2))
    assert doc["result"] is True and hub.unsubscribed == ["sub1"] and not sock.subscriptions
    assert rpc.rate is None  # nothing charged
    _, doc = await send(pipe, sock, call("chain_unsubscribeNewHeads", ["nope"], id_=3))
    assert doc["result"] is False


async def test_a_mixed_batch_is_refused_whole_by_the_quota() -> None:
    hub = Hub()
    pipe, rt = setup(hub, rate_limit={"requests": 3, "window_s": 60})
    sock = Sock()
    batch = [
        call("chain_getHeader", id_=1),
        call("chain_subscribeNewHeads", id_=2),
        call("system_health", id_=3),
        call("chain_subscribeFinalizedHeads", id_=4),
    ]
    rpc, doc = await send(pipe, sock, batch)
    assert rpc.reply is not None and rpc.reply.status == 429
    assert doc["error"]["code"] == -32005 and "4" in doc["error"]["data"]["reason"]
    assert hub.subscribed == [] and sock.subscriptions == {}  # nothing half-done
    assert requests(rt) == {
        ("chain_getHeader", "rate_limited"): 1,
        ("chain_subscribeNewHeads", "rate_limited"): 1,
        ("system_health", "rate_limited"): 1,
        ("chain_subscribeFinalizedHeads", "rate_limited"): 1,
    }


async def test_a_mixed_batch_within_the_quota_is_answered_in_order() -> None:
    hub = Hub()
    pipe, rt = setup(hub)
    sock = Sock()
    batch = [
        call("chain_getHeader", id_=1),
        call("chain_subscribeNewHeads", id_=2),
        call("author_submitAndWatchExtrinsic", ["0x00"], id_=3),
    ]
    rpc, doc = await send(pipe, sock, batch)
    assert [d["id"] for d in doc] == [1, 2, 3]
    assert doc[0]["result"] == "chain_getHeader-ok"  # forwarded as usual
    assert doc[1]["result"] == "sub1"
    assert doc[2]["error"]["data"]["policy"] == "allowlist"  # writes stay refused
    assert rpc.rate is not None and rpc.rate.remaining == 98  # two calls admitted, one unit each
    rows = {r["method"]: r["requests"] for r in rt.usage.drain()}
    assert rows == {"chain_getHeader": 1, "chain_subscribeNewHeads": 1}  # refusals: none
    assert requests(rt) == {
        ("chain_getHeader", "ok"): 1,
        ("chain_subscribeNewHeads", "ok"): 1,
        ("other", "refused"): 1,  # off the allowlist: one label for all
    }


async def test_subscription_policies_refuse_before_the_quota() -> None:
    pipe, rt = setup(Hub(serves=False))
    sock = Sock()
    rpc, doc = await send(pipe, sock, call("chain_subscribeNewHeads"))
    assert doc["error"]["data"]["policy"] == "subscriptions" and rpc.rate is None

    pipe, rt = setup(Hub(), websocket={"max_subscriptions": 1})
    sock = Sock()
    batch = [call("chain_subscribeNewHeads", id_=1), call("chain_subscribeAllHeads", id_=2)]
    rpc, doc = await send(pipe, sock, batch)
    assert doc[0]["result"] == "sub1"
    assert doc[1]["error"]["data"] == {
        "policy": "max_subscriptions",
        "reason": "unsubscribe some, or open another socket",
        "limit": 1,
    }
    assert rpc.rate is not None and rpc.rate.remaining == 99  # only the one admitted
    assert requests(rt)[("chain_subscribeAllHeads", "refused")] == 1


async def test_subscriptions_over_http_stay_refused_by_the_allowlist() -> None:
    from tests.addon.test_stages import body, rpc_flow, run

    stages, _, rt = make()
    rt.subs = Hub()  # type: ignore[assignment]
    f = await run(stages, rpc_flow(call("chain_subscribeNewHeads")))
    assert f.response.status_code == 403
    assert "WebSocket only" in body(f)["error"]["data"]["reason"]


async def test_no_upstream_for_a_subscription_is_an_error_and_a_usage_record() -> None:
    pipe, rt = setup(Hub(fail=True))
    sock = Sock()
    rpc, doc = await send(pipe, sock, call("chain_subscribeNewHeads"))
    assert doc["error"]["code"] == -32603 and "no upstream" in doc["error"]["message"]
    assert rpc.subscribed == {0: None}
    ((row),) = rt.usage.drain()
    assert row["errors"] == 1 and row["endpoint"] is None
    assert requests(rt) == {("chain_subscribeNewHeads", "error"): 1}
