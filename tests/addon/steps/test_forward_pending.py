"""Forwarding in the pipeline: identical calls in flight share one upstream call, and
the clients that joined see it (header, mitmweb annotation, metric); a read the
proxy pinned to a head no node knows is sent again as the client sent it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from addon.chain.head_book import HeadBook
from tests.addon.helpers import (
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
