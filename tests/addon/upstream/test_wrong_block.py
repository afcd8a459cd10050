"""A genesis block answered for another hash is not that block (chopsticks' quirk): the
``wrong-block`` verdict, failover to an upstream that knows the block, and such an
answer never entering the cache."""

from __future__ import annotations

import json
from typing import Any

from addon.cache.memory_store import MemoryStore
from addon.rpc.jsonrpc import Call
from addon.upstream.failover import assess
from addon.upstream.pool import TIER_UNHEALTHY
from tests.addon.chopsticks_headers import BLOCK_2_HASH, BLOCK_2_HEADER, GENESIS_HEADER, PLACEHOLDER
from tests.addon.helpers import (
    A,
    B,
    body,
    cached_stages,
    call,
    rpc_flow,
    run,
)


def block(header: dict[str, Any]) -> dict[str, Any]:
    return {"block": {"header": header, "extrinsics": []}, "justifications": None}


def answer(result: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 0, "result": result}).encode()


def test_genesis_answered_for_another_hash_is_soft_wrong_block() -> None:
    asked = Call(1, "chain_getBlock", [BLOCK_2_HASH])
    a = assess(200, answer(block(GENESIS_HEADER)), [asked], is_batch=False)
    assert (a.verdict, a.reason) == ("soft", "wrong-block")
    header_call = Call(1, "chain_getHeader", [BLOCK_2_HASH])
    a = assess(200, answer(GENESIS_HEADER), [header_call], is_batch=False)
    assert (a.verdict, a.reason) == ("soft", "wrong-block")
    assert assess(200, answer(BLOCK_2_HEADER), [header_call], is_batch=False).verdict == "ok"
    # The placeholder genesis hash itself is also not what the header hashes to:
    # soft, so the client still gets the genesis when no upstream does better.
    placeholder = Call(1, "chain_getHeader", [PLACEHOLDER])
    assert assess(200, answer(GENESIS_HEADER), [placeholder], is_batch=False).verdict == "soft"


def _by_url(answers: dict[str, Any]) -> dict[str, Any]:
    def behaviour_for(result: Any) -> Any:
        def reply(doc: Any) -> tuple[int, bytes]:
            return 200, json.dumps({"jsonrpc": "2.0", "id": doc["id"], "result": result}).encode()

        return reply

    return {url: behaviour_for(result) for url, result in answers.items()}


async def test_the_client_gets_the_block_from_the_upstream_that_knows_it() -> None:
    stages, fake, rt = cached_stages()
    fake.behaviour = _by_url({A: block(GENESIS_HEADER), B: block(BLOCK_2_HEADER)})
    b = next(u for u in rt.pools["finney"].upstreams.values() if u.url == B)
    b.tier = TIER_UNHEALTHY  # so A (on another fork) is asked first
    f = await run(stages, rpc_flow(call("chain_getBlock", [BLOCK_2_HASH])))
    assert body(f)["result"]["block"]["header"] == BLOCK_2_HEADER
    assert [url for url, _ in fake.seen] == [A, B]
    assert f.response.headers["X-Chainproxy-Upstream"] == b.id
    # and that (correct) answer is cached
    f = await run(stages, rpc_flow(call("chain_getBlock", [BLOCK_2_HASH])))
    assert f.response.headers["X-Cache"] == "HIT"


async def test_a_wrong_block_from_every_upstream_is_served_but_never_cached() -> None:
    stages, fake, rt = cached_stages()
    assert isinstance(rt.cache, MemoryStore)
    fake.behaviour = _by_url({A: GENESIS_HEADER, B: GENESIS_HEADER})
    for _ in range(2):
        fake.seen.clear()
        f = await run(stages, rpc_flow(call("chain_getHeader", [PLACEHOLDER])))
        assert body(f)["result"] == GENESIS_HEADER  # the best answer there is
        assert f.response.headers["X-Cache"] == "MISS"
        assert len(fake.seen) == 2  # both upstreams asked, every time
