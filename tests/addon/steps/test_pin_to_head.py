"""Head pinning inside the real pipeline (mitmproxy test flows, an in-process fake
upstream): a read after a head was shown goes pinned to it, never behind a newer
head, and pinning and sharing can be switched off."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from addon.cache.memory_store import MemoryStore
from addon.chain.header_hash import header_hash
from addon.pipeline.context import META_KEY
from tests.addon.helpers import (
    A,
    B,
    body,
    call,
    make,
    rpc_flow,
    run,
)

HEADER = {
    "parentHash": "0x" + "11" * 32,
    "number": hex(4_000_000),
    "stateRoot": "0x" + "22" * 32,
    "extrinsicsRoot": "0x" + "33" * 32,
    "digest": {"logs": []},
}

HEAD = header_hash(HEADER)


def _header_upstream(doc: Any) -> tuple[int, bytes]:
    result = HEADER if doc["method"] == "chain_getHeader" else f"{doc['method']}-ok"
    return 200, json.dumps({"jsonrpc": "2.0", "id": doc["id"], "result": result}).encode()


async def test_a_read_after_a_head_was_shown_is_pinned_to_it() -> None:
    stages, fake, _ = make()
    fake.behaviour = {A: _header_upstream, B: _header_upstream}
    shown = await run(stages, rpc_flow(call("chain_getHeader")))
    assert body(shown)["result"] == HEADER  # the head the client saw; the proxy learned it
    f = await run(stages, rpc_flow(call("state_getStorage", ["0x01"], id_=5)))
    assert fake.seen[-1][1]["params"] == ["0x01", HEAD]  # sent pinned
    assert body(f) == {"jsonrpc": "2.0", "id": 5, "result": "state_getStorage-ok"}
    assert f.response.headers["X-Chainproxy-Pinned"] == HEAD
    assert f.metadata[META_KEY]["pinned"] == HEAD and "PINNED" in f.comment


async def test_no_fresh_head_means_the_read_goes_as_sent() -> None:
    stages, fake, rt = make()
    fake.behaviour = {A: _header_upstream, B: _header_upstream}
    f = await run(stages, rpc_flow(call("state_getStorage", ["0x01"])))
    assert fake.seen[-1][1]["params"] == ["0x01"]  # nothing seen yet
    assert "X-Chainproxy-Pinned" not in f.response.headers
    await run(stages, rpc_flow(call("chain_getHeader")))
    rt.clock.t += 31  # type: ignore[attr-defined]  # older than max_age_s
    await run(stages, rpc_flow(call("state_getStorage", ["0x02"])))
    assert fake.seen[-1][1]["params"] == ["0x02"]
    await run(stages, rpc_flow(call("chain_getHeader")))  # seen again: fresh
    rt.chain.tips["finney"] = 4_000_001  # but the probes saw a newer block
    await run(stages, rpc_flow(call("state_getStorage", ["0x03"])))
    assert fake.seen[-1][1]["params"] == ["0x03"]


NEXT = {**HEADER, "parentHash": HEAD, "number": hex(4_000_001)}

NEXT_HASH = header_hash(NEXT)


def _moving_upstream(doc: Any) -> tuple[int, bytes]:
    """The head is #4_000_000; chain_getHead already answers the next block."""
    method, params = doc["method"], doc["params"]
    if method == "chain_getHeader":
        result: Any = NEXT if params == [NEXT_HASH] else HEADER
    elif method == "chain_getHead":
        result = NEXT_HASH
    else:
        result = f"{method}-ok"
    return 200, json.dumps({"jsonrpc": "2.0", "id": doc["id"], "result": result}).encode()


async def test_a_newer_head_hash_shown_without_its_header_is_never_pinned_behind() -> None:
    stages, fake, _ = make()
    fake.behaviour = {A: _moving_upstream, B: _moving_upstream}
    await run(stages, rpc_flow(call("chain_getHeader")))  # head #4_000_000 learned
    shown = await run(stages, rpc_flow(call("chain_getHead")))
    assert body(shown)["result"] == NEXT_HASH  # the client now knows a newer block
    f = await run(stages, rpc_flow(call("state_getStorage", ["0x01"])))
    assert fake.seen[-1][1]["params"] == ["0x01"]  # as sent: never pinned behind NEXT
    assert "X-Chainproxy-Pinned" not in f.response.headers
    await run(stages, rpc_flow(call("chain_getHeader", [NEXT_HASH])))  # what the SDK asks next
    f = await run(stages, rpc_flow(call("state_getStorage", ["0x02"])))
    assert fake.seen[-1][1]["params"] == ["0x02", NEXT_HASH]
    assert f.response.headers["X-Chainproxy-Pinned"] == NEXT_HASH


async def test_the_shown_heads_header_from_the_cache_resumes_pinning() -> None:
    fetcher, _, rt1 = make()  # another proxy process, which fetched the header
    stages, fake, rt2 = make()
    rt1.cache = rt2.cache = MemoryStore()
    for rt in (rt1, rt2):
        rt.transport.behaviour = {A: _moving_upstream, B: _moving_upstream}  # type: ignore[union-attr]
    await run(fetcher, rpc_flow(call("chain_getHeader", [NEXT_HASH])))
    await run(stages, rpc_flow(call("chain_getHeader")))
    await run(stages, rpc_flow(call("chain_getHead")))
    f = await run(stages, rpc_flow(call("chain_getHeader", [NEXT_HASH])))
    assert f.response.headers["X-Cache"] == "HIT"
    before = len(fake.seen)
    await run(stages, rpc_flow(call("state_getStorage", ["0x03"])))
    assert fake.seen[before:][0][1]["params"] == ["0x03", NEXT_HASH]


async def test_pinning_and_sharing_can_be_switched_off() -> None:
    stages, fake, _ = make(head_pinning={"enabled": False}, coalesce={"enabled": False})
    fake.behaviour = {A: _header_upstream, B: _header_upstream}
    await run(stages, rpc_flow(call("chain_getHeader")))
    await run(stages, rpc_flow(call("state_getStorage", ["0x01"])))
    assert fake.seen[-1][1]["params"] == ["0x01"]
    flows = [rpc_flow(call("system_health", id_=i)) for i in range(5)]
    before = len(fake.seen)
    await asyncio.gather(*(run(stages, f) for f in flows))
    assert len(fake.seen) - before == 5  # each its own upstream call
