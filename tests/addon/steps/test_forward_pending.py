"""Forwarding in the pipeline: identical calls in flight share one upstream call, and
the clients that joined see it (header, mitmweb annotation, metric); a read the
proxy pinned to a head no node knows is sent again as the client sent it."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from addon.chain.head_book import HeadBook
from addon.upstream.transport import TransportError
from tests.addon.helpers import (
    A,
    B,
    body,
    call,
    make,
    rpc_flow,
    run,
)


async def test_identical_calls_in_flight_share_one_upstream_call() -> None:
    stages, _, rt = make()
    gate = asyncio.Event()

    async def slow(doc: Any) -> tuple[int, bytes]:
        await gate.wait()
        return 200, json.dumps({"jsonrpc": "2.0", "id": doc["id"], "result": "ok"}).encode()

    class Slow:
        seen: list[Any] = []

        async def post(self, url: str, raw: bytes, timeout: float) -> tuple[int, bytes]:
            self.seen.append(raw)
            return await slow(json.loads(raw))

    rt.transport = Slow()
    flows = [rpc_flow(call("system_health", id_=i)) for i in range(10)]
    tasks = [asyncio.ensure_future(run(stages, f)) for f in flows]
    await asyncio.sleep(0.05)
    gate.set()
    await asyncio.gather(*tasks)
    assert len(Slow.seen) == 1
    assert [body(f)["id"] for f in flows] == list(range(10))  # each its own id
    joined = [f for f in flows if f.response.headers.get("X-Chainproxy-Coalesced") == "1"]
    assert len(joined) == 9 and all("COALESCED" in f.comment for f in joined)
    # mitmweb's comment, as OPERATIONS shows it: "#id network method → node · …"
    first = flows[0].comment
    assert re.match(r"#\S+ finney system_health → \S+ endpoint-srf-\S+ · 1 attempt ", first), first
    assert rt.metrics._extra[("chainproxy_coalesced_total", (("network", "finney"),))] == 9


async def test_a_read_pinned_to_a_head_no_node_knows_is_sent_again_unpinned() -> None:
    stages, _, rt = make()
    head = "0x" + "ab" * 32
    header = {
        "parentHash": "0x" + "11" * 32,
        "number": hex(5000),
        "stateRoot": "0x" + "22" * 32,
        "extrinsicsRoot": "0x" + "33" * 32,
        "digest": {"logs": []},
    }
    rt.chain.best = HeadBook()
    rt.chain.best.learn("finney", header, rt.clock(), block_hash=head)
    sent: list[Any] = []

    class Node:
        async def post(self, url: str, raw: bytes, timeout: float) -> tuple[int, bytes]:
            doc = json.loads(raw)
            sent.append(doc["params"])
            if head in doc["params"]:
                err = {"code": -32000, "message": "Client error: UnknownBlock: not found"}
                return 200, json.dumps({"jsonrpc": "2.0", "id": doc["id"], "error": err}).encode()
            return 200, json.dumps({"jsonrpc": "2.0", "id": doc["id"], "result": "0x2a"}).encode()

    rt.transport = Node()
    f = rpc_flow(call("state_getStorage", ["0x01"], id_=7))
    await run(stages, f)
    assert f.response.status_code == 200
    assert body(f) == {"jsonrpc": "2.0", "id": 7, "result": "0x2a"}
    assert sent == [["0x01", head], ["0x01"]]  # pinned, then as the client sent it
    assert f.response.headers["X-Chainproxy-Pinned"] == "missed"
    assert f.response.headers["X-Chainproxy-Attempts"] == "2"
    assert "PIN-MISSED" in f.comment
    assert rt.chain.best.distrusted("finney") == head
    assert rt.metrics._extra[("chainproxy_pin_fallbacks_total", (("network", "finney"),))] == 1
    # not cached under the pinned block: the next read goes upstream, unpinned
    f2 = rpc_flow(call("state_getStorage", ["0x01"], id_=8))
    await run(stages, f2)
    assert sent[-1] == ["0x01"] and "X-Chainproxy-Pinned" not in f2.response.headers


class _Refusing:
    """Both nodes answer every state_getKeysPaged with their work limit (-32004),
    inside a 200, and everything else with a result."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def post(self, url: str, raw: bytes, timeout: float) -> tuple[int, bytes]:
        self.seen.append(url)
        doc = json.loads(raw)

        def one(o: dict[str, Any]) -> dict[str, Any]:
            if o["method"] == "state_getKeysPaged":
                err = {"code": -32004, "message": "RPC work limit exceeded"}
                return {"jsonrpc": "2.0", "id": o["id"], "error": err}
            return {"jsonrpc": "2.0", "id": o["id"], "result": "0x2a"}

        out = [one(o) for o in doc] if isinstance(doc, list) else one(doc)
        return 200, json.dumps(out).encode()


async def test_a_call_every_node_refused_for_its_limits_is_503_upstream_capacity() -> None:
    """Never the node's -32004 passed on as the client's answer: 503 with
    Retry-After and the policy, as when every node said 429."""
    stages, _, rt = make()
    rt.transport = node = _Refusing()
    f = rpc_flow(call("state_getKeysPaged", ["0x26aa", 10], id_=3))
    await run(stages, f)
    assert f.response.status_code == 503 and int(f.response.headers["Retry-After"]) >= 1
    error = body(f)["error"]
    assert error["data"]["policy"] == "upstream_capacity" and error["data"]["retry_after"] >= 1
    assert [a["reason"] for a in error["data"]["attempts"]] == ["work-limited"] * 2
    assert len(set(node.seen)) == 2  # both nodes asked, once each


async def test_a_502_names_the_node_paused_at_its_retry_after_and_when_it_is_back() -> None:
    """A answered 429 with ``Retry-After: 10`` and pauses; B fails: the 502
    says A was not asked and when it takes calls again (data, header), where
    before it listed B's attempt alone and no time."""
    stages, fake, rt = make(upstream_limits={"max_wait_s": 0})
    pool = rt.pools["finney"]
    a, b = (next(u for u in pool.upstreams.values() if u.url == url) for url in (A, B))
    pool.started(a)
    pool.throttled(a, 5, 10.0, "rate-limited")
    fake.behaviour[B] = TransportError("http-500")
    f = rpc_flow(call("system_health", id_=4))
    await run(stages, f)
    assert f.response.status_code == 502 and f.response.headers["Retry-After"] == "10"
    error = body(f)["error"]
    assert [x["endpoint"] for x in error["data"]["attempts"]] == [b.id]
    assert error["data"]["paused"] == {a.id: 10} and error["data"]["retry_after"] == 10
    assert f"paused by their Retry-After ({a.id}), back in 10 s" in error["message"]
    # nothing paused: the 502 as before, without a time
    rt.clock.advance(11)  # type: ignore[attr-defined]
    fake.behaviour[A] = TransportError("http-500")
    f = rpc_flow(call("system_health", id_=5))
    await run(stages, f)
    assert f.response.status_code == 502 and "Retry-After" not in f.response.headers
    assert "paused" not in body(f)["error"]["data"]


async def test_a_batch_keeps_its_answers_but_for_the_items_every_node_refused() -> None:
    stages, _, rt = make()
    rt.transport = _Refusing()
    batch = [call("system_health", id_=1), call("state_getKeysPaged", ["0x26aa", 10], id_=2)]
    f = rpc_flow(batch)
    await run(stages, f)
    assert f.response.status_code == 200  # a batch: per-item errors
    first, second = body(f)
    assert first == {"jsonrpc": "2.0", "id": 1, "result": "0x2a"}
    assert second["id"] == 2 and second["error"]["data"]["policy"] == "upstream_capacity"


# --- state horizons ------------------------------------------------------------------------

OLD = "0x" + "cd" * 32  # a block whose height the proxy learned: 100
KEY = "0x26aa394eea5630e07c48ae0c9558cef702a5c1b19ab7a04f536c519aca4983ac"


def _horizons(rt: Any, **by_provider: tuple[int | None, int | None]) -> None:
    """Each node's measured (horizon, horizon_lost), as a snapshot gives them."""
    pool = rt.pools["finney"]
    pool.tip = 10_000
    for u in pool.upstreams.values():
        u.horizon, u.horizon_lost = by_provider[u.provider]
        u.best = 10_000
    rt.chain.blocks.put(OLD, 100)


async def test_a_read_no_node_holds_the_state_of_is_the_typed_error_without_asking() -> None:
    stages, _, rt = make(head_pinning={"enabled": False})
    _horizons(rt, alpha=(9_745, 9_744), beta=(5_000, 4_000))
    sent: list[Any] = []

    class Node:
        async def post(self, url: str, raw: bytes, timeout: float) -> tuple[int, bytes]:
            doc = json.loads(raw)
            sent.append(doc)
            answers = [{"jsonrpc": "2.0", "id": c["id"], "result": {}} for c in doc]
            return 200, json.dumps(answers).encode()

    rt.transport = Node()
    f = rpc_flow(call("state_getStorage", [KEY, OLD], id_=4))
    await run(stages, f)
    assert sent == []  # no node was asked
    assert f.response.status_code == 200
    error = body(f)["error"]
    assert body(f)["id"] == 4 and error["code"] == 4003
    assert error["data"] == {
        "policy": "state_unavailable",
        "reason": error["data"]["reason"],
        "block": 100,
        "oldest_block": 5_000,
    }
    refusals = {k: v for k, v in rt.metrics._extra.items() if k[0] == "chainproxy_refusals_total"}
    assert refusals == {("chainproxy_refusals_total", (("policy", "state_unavailable"),)): 1}
    # in a batch only that call is refused; the others go upstream
    f2 = rpc_flow([call("state_getStorage", [KEY, OLD], id_=1), call("system_health", id_=2)])
    await run(stages, f2)
    assert len(sent) == 1 and [c["method"] for c in sent[0]] == ["system_health"]
    first, second = body(f2)
    assert first["error"]["data"]["policy"] == "state_unavailable" and second["result"] == {}


async def test_nodes_that_say_discarded_are_corrected_and_the_client_gets_the_typed_error() -> None:
    stages, _, rt = make(head_pinning={"enabled": False})
    _horizons(rt, alpha=(50, 10), beta=(60, 10))  # both believed to hold block 100
    asked: list[str] = []
    gone = "Client error: State already discarded for " + OLD

    class Pruned:
        async def post(self, url: str, raw: bytes, timeout: float) -> tuple[int, bytes]:
            asked.append(url)
            doc = json.loads(raw)
            err = {"code": 4003, "message": gone}
            return 200, json.dumps({"jsonrpc": "2.0", "id": doc["id"], "error": err}).encode()

    rt.transport = Pruned()
    f = rpc_flow(call("state_getStorage", [KEY, OLD], id_=9))
    await run(stages, f)
    assert len(asked) == 2  # each node once, then nothing else may hold it
    error = body(f)["error"]
    assert error["data"]["policy"] == "state_unavailable" and error["data"]["block"] == 100
    # both corrected (they lack up to 100): where their state starts now is not
    # known, and a client is not told a guess (101 would be refused in turn)
    assert error["data"]["oldest_block"] is None
    ups = rt.pools["finney"].upstreams.values()
    assert all(u.lost_seen == 100 for u in ups)
    assert rt._upstream_gauges()["upstream_state_lost"] == {u.id: 100 for u in ups}
    # the next read of that block asks no node
    await run(stages, rpc_flow(call("state_getStorage", [KEY, OLD], id_=10)))
    assert len(asked) == 2
    # both typed answers are refusals of one policy, the one after asking too
    refusals = {k: v for k, v in rt.metrics._extra.items() if k[0] == "chainproxy_refusals_total"}
    assert refusals == {("chainproxy_refusals_total", (("policy", "state_unavailable"),)): 2}


async def test_discarded_at_a_block_of_unknown_height_is_typed_once_every_node_said_so() -> None:
    stages, _, rt = make(head_pinning={"enabled": False})
    unknown = "0x" + "ef" * 32
    gone = "Client error: State already discarded for " + unknown

    class Pruned:
        async def post(self, url: str, raw: bytes, timeout: float) -> tuple[int, bytes]:
            doc = json.loads(raw)
            err = {"code": 4003, "message": gone}
            return 200, json.dumps({"jsonrpc": "2.0", "id": doc["id"], "error": err}).encode()

    rt.transport = Pruned()
    f = rpc_flow(call("state_getStorage", [KEY, unknown], id_=3))
    await run(stages, f)
    data = body(f)["error"]["data"]
    assert (data["policy"], data["block"], data["oldest_block"]) == (
        "state_unavailable",
        None,
        None,
    )
