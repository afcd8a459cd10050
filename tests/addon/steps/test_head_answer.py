"""``chain_getHead`` answered from the head the proxy follows, and
``chain_getHeader`` without a hash pinned to it, inside the real pipeline
(mitmproxy test flows, an in-process fake upstream): only while a new-heads
subscription is live and the head is fresh, never for a number, never when
switched off; otherwise a node answers and the watch hears of it. The header
is pinned only with ``head_pinning.pin_headers`` (off by default: then
``chain_getHeader`` without a hash goes as sent, which is how these tests let
the proxy learn a head)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from addon.cache.memory_store import MemoryStore
from addon.chain.header_hash import header_hash
from tests.addon.helpers import A, B, body, call, make, rpc_flow, run

HEADER = {
    "parentHash": "0x" + "11" * 32,
    "number": hex(4_000_000),
    "stateRoot": "0x" + "22" * 32,
    "extrinsicsRoot": "0x" + "33" * 32,
    "digest": {"logs": []},
}
HEAD = header_hash(HEADER)
NODE_HEAD = "0x" + "ab" * 32  # what the nodes answer to chain_getHead
PIN_HEADERS = {"pin_headers": True}


BLOCK = {"block": {"header": HEADER, "extrinsics": []}, "justifications": None}


def _answer(doc: Any) -> dict[str, Any]:
    result = {
        "chain_getHeader": HEADER,
        "chain_getBlock": BLOCK,
        "chain_getHead": NODE_HEAD,
        "chain_getBlockHash": NODE_HEAD,
    }.get(doc["method"], "ok")
    return {"jsonrpc": "2.0", "id": doc["id"], "result": result}


def _upstream(doc: Any) -> tuple[int, bytes]:
    answer = [_answer(d) for d in doc] if isinstance(doc, list) else _answer(doc)
    return 200, json.dumps(answer).encode()


def _unknown_head(doc: Any) -> tuple[int, bytes]:
    """Nodes that have not imported the head yet: ``null`` for what names its hash."""
    docs = doc if isinstance(doc, list) else [doc]
    if any(HEAD in (d.get("params") or []) for d in docs):
        out = [{"jsonrpc": "2.0", "id": d["id"], "result": None} for d in docs]
        return 200, json.dumps(out if isinstance(doc, list) else out[0]).encode()
    return _upstream(doc)


@dataclass
class FakeWatch:
    """The step's view of ``HeadWatch``: whether a subscription is live, and what it heard."""

    is_live: bool = True
    heard: list[str] = field(default_factory=list)

    def live(self, network: str) -> bool:
        return self.is_live

    def asked(self, network: str) -> None:
        self.heard.append(f"asked {network}")

    def answered(self, network: str) -> None:
        self.heard.append(f"answered {network}")


def _setup(live: bool = True, **proxy: Any) -> tuple[list[Any], Any, Any, FakeWatch]:
    stages, fake, rt = make(**proxy)
    fake.behaviour = {A: _upstream, B: _upstream}
    watch = FakeWatch(is_live=live)
    rt.lasting.head_watch = watch  # type: ignore[assignment]
    return stages, fake, rt, watch


def _sent(fake: Any, method: str) -> list[Any]:
    """The params of each ``method`` call the nodes were sent."""
    docs = [d for _, doc in fake.seen for d in (doc if isinstance(doc, list) else [doc])]
    return [d.get("params") for d in docs if d["method"] == method]


def _head_calls(fake: Any) -> int:
    return len(_sent(fake, "chain_getHead"))


async def test_a_live_subscription_and_a_fresh_head_answer_without_a_node() -> None:
    stages, fake, _, watch = _setup()
    await run(stages, rpc_flow(call("chain_getHeader")))  # the proxy learns the head
    for params in ([], [None]):
        f = await run(stages, rpc_flow(call("chain_getHead", params, id_=7)))
        assert body(f) == {"jsonrpc": "2.0", "id": 7, "result": HEAD}
        assert f.response.headers["X-Cache"] == "HIT"
    assert _head_calls(fake) == 0
    assert watch.heard == ["answered finney", "answered finney"]


async def test_chain_get_block_hash_without_a_number_is_the_same_question() -> None:
    stages, fake, _, watch = _setup()
    await run(stages, rpc_flow(call("chain_getHeader")))
    for params in ([], [None]):
        f = await run(stages, rpc_flow(call("chain_getBlockHash", params, id_=3)))
        assert body(f) == {"jsonrpc": "2.0", "id": 3, "result": HEAD}
        assert f.response.headers["X-Cache"] == "HIT"
    f = await run(stages, rpc_flow(call("chain_getBlockHash", [4_000_000])))  # a number
    assert body(f)["result"] == NODE_HEAD
    assert _sent(fake, "chain_getBlockHash") == [[4_000_000]]
    assert watch.heard == ["answered finney", "answered finney"]


async def test_without_a_live_subscription_a_node_answers_and_the_watch_hears() -> None:
    stages, fake, _, watch = _setup(live=False)
    await run(stages, rpc_flow(call("chain_getHeader")))
    f = await run(stages, rpc_flow(call("chain_getHead")))
    assert body(f)["result"] == NODE_HEAD and _head_calls(fake) == 1
    assert watch.heard == ["asked finney"]


async def test_a_head_that_is_not_fresh_is_not_answered() -> None:
    stages, fake, rt, watch = _setup()
    f = await run(stages, rpc_flow(call("chain_getHead")))  # no head known yet
    assert body(f)["result"] == NODE_HEAD
    await run(stages, rpc_flow(call("chain_getHeader")))
    rt.chain.tips["finney"] = 4_000_001  # the probes saw a newer block
    f = await run(stages, rpc_flow(call("chain_getHead")))
    assert body(f)["result"] == NODE_HEAD
    del rt.chain.tips["finney"]
    rt.clock.t += 31  # type: ignore[attr-defined]  # older than head_pinning.max_age_s
    f = await run(stages, rpc_flow(call("chain_getHead")))
    assert body(f)["result"] == NODE_HEAD
    assert _head_calls(fake) == 3 and watch.heard == ["asked finney"] * 3


async def test_a_height_is_always_asked_of_a_node() -> None:
    stages, fake, _, _ = _setup()
    await run(stages, rpc_flow(call("chain_getHeader")))
    f = await run(stages, rpc_flow(call("chain_getHead", [4_000_000])))
    assert body(f)["result"] == NODE_HEAD and _head_calls(fake) == 1


async def test_switched_off_it_always_asks_a_node() -> None:
    for proxy in ({"head_pinning": {"answer_head": False}}, {"head_pinning": {"enabled": False}}):
        stages, fake, _, watch = _setup(**proxy)
        await run(stages, rpc_flow(call("chain_getHeader")))
        f = await run(stages, rpc_flow(call("chain_getHead")))
        assert body(f)["result"] == NODE_HEAD and _head_calls(fake) == 1
        assert watch.heard == []


async def test_in_a_batch_only_the_head_is_answered_here() -> None:
    stages, fake, _, _ = _setup()
    await run(stages, rpc_flow(call("chain_getHeader")))
    batch = [call("chain_getHead", id_=1), call("state_getStorage", ["0x01"], id_=2)]
    f = await run(stages, rpc_flow(batch))
    assert body(f) == [
        {"jsonrpc": "2.0", "id": 1, "result": HEAD},
        {"jsonrpc": "2.0", "id": 2, "result": "ok"},
    ]
    assert _head_calls(fake) == 0
    assert f.response.headers["X-Cache"] == "MISS"  # not everything was answered here


async def test_the_best_blocks_header_is_pinned_to_the_head_and_then_a_hit() -> None:
    """A poller's ``chain_getHeader`` (and ``chain_getBlock``) without a hash:
    asked of a node by the head's hash once, then answered from the cache; the
    same block the proxy pins reads to. ``chain_getBlockHash`` without a number
    is the head's hash."""
    stages, fake, rt, watch = _setup(head_pinning=PIN_HEADERS)
    rt.cache = MemoryStore()
    await run(stages, rpc_flow(call("chain_getHeader")))  # learns the head
    for method, answer in (("chain_getHeader", HEADER), ("chain_getBlock", BLOCK)):
        before = len(_sent(fake, method))
        for n, params in enumerate(([], [None], [])):
            f = await run(stages, rpc_flow(call(method, params, id_=n)))
            assert body(f) == {"jsonrpc": "2.0", "id": n, "result": answer}
            assert f.response.headers["X-Chainproxy-Pinned"] == HEAD
            assert f.response.headers["X-Cache"] == ("MISS" if n == 0 else "HIT")
        assert _sent(fake, method)[before:] == [[HEAD]]  # one node call, by the hash
    f = await run(stages, rpc_flow(call("chain_getBlockHash", [], id_=9)))
    assert body(f) == {"jsonrpc": "2.0", "id": 9, "result": HEAD}
    assert f.response.headers["X-Cache"] == "HIT" and _sent(fake, "chain_getBlockHash") == []
    f = await run(stages, rpc_flow(call("chain_getBlockHash", [4_000_000])))
    assert body(f)["result"] == NODE_HEAD and _sent(fake, "chain_getBlockHash") == [[4_000_000]]
    f = await run(stages, rpc_flow(call("chain_getHeader", ["0x" + "cd" * 32])))  # a hash: as sent
    assert "X-Chainproxy-Pinned" not in f.response.headers
    assert watch.heard == ["asked finney"] + ["answered finney"] * 7


async def test_by_default_or_without_a_live_subscription_the_header_goes_as_sent() -> None:
    stages, fake, rt, watch = _setup()  # pin_headers off: "the latest", never cached
    rt.cache = MemoryStore()
    for _ in range(3):
        f = await run(stages, rpc_flow(call("chain_getHeader")))
        assert f.response.headers["X-Cache"] == "MISS"
        assert "X-Chainproxy-Pinned" not in f.response.headers
    assert _sent(fake, "chain_getHeader") == [[], [], []] and watch.heard == []
    stages, fake, _, watch = _setup(live=False, head_pinning=PIN_HEADERS)
    await run(stages, rpc_flow(call("chain_getHeader")))
    f = await run(stages, rpc_flow(call("chain_getHeader")))
    assert body(f)["result"] == HEADER and "X-Chainproxy-Pinned" not in f.response.headers
    assert _sent(fake, "chain_getHeader") == [[], []] and watch.heard == ["asked finney"] * 2
    stages, fake, _, watch = _setup(head_pinning={**PIN_HEADERS, "answer_head": False})
    await run(stages, rpc_flow(call("chain_getHeader")))
    await run(stages, rpc_flow(call("chain_getHeader")))
    assert _sent(fake, "chain_getHeader") == [[], []] and watch.heard == []


async def test_a_header_no_node_knows_is_asked_again_as_sent() -> None:
    """Pinning never fails a call: a node that answers ``null`` for the head's
    hash (it has not imported it) gets the client's own call again."""
    stages, fake, _, _ = _setup(head_pinning=PIN_HEADERS)
    await run(stages, rpc_flow(call("chain_getHeader")))
    fake.behaviour = {A: _unknown_head, B: _unknown_head}
    f = await run(stages, rpc_flow(call("chain_getHeader", id_=5)))
    assert body(f) == {"jsonrpc": "2.0", "id": 5, "result": HEADER}
    assert f.response.headers["X-Chainproxy-Pinned"] == "missed"
    assert _sent(fake, "chain_getHeader")[1:] == [[HEAD], []]


async def test_a_batch_pins_its_header_and_its_reads_to_one_head() -> None:
    stages, fake, _, _ = _setup(head_pinning=PIN_HEADERS)
    await run(stages, rpc_flow(call("chain_getHeader")))
    batch = [call("chain_getHeader", id_=1), call("state_getStorage", ["0x01"], id_=2)]
    f = await run(stages, rpc_flow(batch))
    assert body(f) == [
        {"jsonrpc": "2.0", "id": 1, "result": HEADER},
        {"jsonrpc": "2.0", "id": 2, "result": "ok"},
    ]
    assert _sent(fake, "chain_getHeader")[1:] == [[HEAD]]
    assert _sent(fake, "state_getStorage") == [["0x01", HEAD]]
    assert f.response.headers["X-Chainproxy-Pinned"] == HEAD


async def test_a_batch_whose_pin_missed_goes_again_whole_as_sent() -> None:
    """The header and the read were pinned by two steps into one set of reads
    to put back: both go again as the client sent them."""
    stages, fake, _, _ = _setup(head_pinning=PIN_HEADERS)
    await run(stages, rpc_flow(call("chain_getHeader")))
    fake.behaviour = {A: _unknown_head, B: _unknown_head}
    batch = [call("chain_getHeader", id_=1), call("state_getStorage", ["0x01"], id_=2)]
    f = await run(stages, rpc_flow(batch))
    assert body(f) == [
        {"jsonrpc": "2.0", "id": 1, "result": HEADER},
        {"jsonrpc": "2.0", "id": 2, "result": "ok"},
    ]
    assert f.response.headers["X-Chainproxy-Pinned"] == "missed"
    assert _sent(fake, "chain_getHeader")[1:] == [[HEAD], []]
    assert _sent(fake, "state_getStorage") == [["0x01", HEAD], ["0x01"]]


async def test_an_excluded_header_method_is_never_pinned() -> None:
    pin = {**PIN_HEADERS, "exclude": ["chain_getBlock"]}
    stages, fake, _, _ = _setup(head_pinning=pin)
    await run(stages, rpc_flow(call("chain_getHeader")))
    f = await run(stages, rpc_flow(call("chain_getBlock")))
    assert "X-Chainproxy-Pinned" not in f.response.headers and _sent(fake, "chain_getBlock") == [[]]
    f = await run(stages, rpc_flow(call("chain_getHeader")))
    assert f.response.headers["X-Chainproxy-Pinned"] == HEAD
