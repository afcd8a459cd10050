"""A node quarantined by a cross-check leaves the cache with every entry it
answered, the right ones and the wrong ones never sampled: what it answered
before it was caught is read again from the other nodes. The pipeline with
three in-process fake nodes, one of them answering some keys wrongly."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from addon.addons import Guard
from addon.cache.memory_store import MemoryStore
from addon.hooks.holder import RuntimeHolder
from addon.hooks.pipeline import RpcPipeline
from addon.reporting.live_metrics import CACHE_PURGED
from addon.runtime import Runtime
from common.config import parse_config
from tests.addon.helpers import FakeUpstreams, call, rpc_flow, run
from tests.fakes import FakeClock

BLOCK = "0x" + "ab" * 32
NODES = {"alpha": "http://a.example:9944", "beta": "http://b.example:9944"}
LIAR = "http://liar.example:9944"


def _value(key: str, liar: bool) -> str:
    wrong = liar and int(key[-2:], 16) % 2 == 0  # half the keys
    return f"0xbad{key[2:]}" if wrong else f"0x{key[2:]}"


def _node(liar: bool) -> Any:
    def answer(doc: dict[str, Any]) -> tuple[int, bytes]:
        result = _value(doc["params"][0], liar)
        return 200, json.dumps({"jsonrpc": "2.0", "id": doc["id"], "result": result}).encode()

    return answer


def _stack() -> tuple[list[Any], FakeUpstreams, Runtime]:
    urls = {**NODES, "liar": LIAR}
    endpoints = [
        {"url": u, "provider": name, "kind": "node-rpc", "network": "finney"}
        for name, u in urls.items()
    ]
    config = parse_config(
        {
            "proxy": {
                "networks": ["finney"],
                "cross_check": {"sample_rate": 1.0},
                "rate_limit": {"requests": 1_000_000, "window_s": 60},
            },
            "registry": {"endpoints": endpoints},
        },
        env={},
    )
    holder = RuntimeHolder()
    rt = Runtime.build(config, clock=FakeClock(1000.0))
    fake = FakeUpstreams()
    fake.behaviour = {u: _node(u == LIAR) for u in urls.values()}
    rt.transport = fake
    rt.cache = MemoryStore()
    holder.runtime = rt
    rt.chain.set_heights("finney", 120, 100)
    return [RpcPipeline(holder), Guard()], fake, rt


async def _read(stages: list[Any], key: str) -> tuple[str, str, str]:
    """(the value, who answered it, whether it came from the cache)."""
    f = await run(stages, rpc_flow(call("state_getStorage", [key, BLOCK])))
    upstream = f.response.headers.get("X-Chainproxy-Upstream", "")
    return json.loads(f.response.content)["result"], upstream, f.response.headers["X-Cache"]


async def _settled(rt: Runtime) -> None:
    checker = rt.cross_checker
    assert checker is not None
    for _ in range(1000):
        if not checker._tasks and not rt.purges._tasks:
            return
        await asyncio.sleep(0)
    raise AssertionError("checks or purges still running")


async def test_a_quarantined_nodes_cached_answers_all_leave() -> None:
    stages, _, rt = _stack()
    liar = next(u.id for u in rt.pools["finney"].upstreams.values() if u.url == LIAR)
    # the block's finality not yet known: answers are cached, never checked
    keys = [f"0x{i:02x}" for i in range(60)]
    first = {k: await _read(stages, k) for k in keys}
    await _settled(rt)
    by_liar = [k for k, (_, up, _) in first.items() if up == liar]
    wrong = [k for k, (v, _, _) in first.items() if v != _value(k, False)]
    assert by_liar and wrong and set(wrong) <= set(by_liar)
    assert rt.cache is not None and isinstance(rt.cache, MemoryStore)
    assert sorted(k for k, f in rt.cache.fillers.items() if f == liar)  # entries it filled
    # the block now known final: reads are checked until the liar is caught
    rt.chain.blocks.put(BLOCK, 90, canonical=True)
    for i in range(100, 200):
        await _read(stages, f"0x{i:02x}")
        await _settled(rt)
        if rt.pools["finney"].upstreams[liar].quarantined:
            break
    assert rt.pools["finney"].upstreams[liar].quarantined
    assert liar not in rt.cache.fillers.values()  # every entry it filled: gone
    purged = rt.metrics._extra[(CACHE_PURGED, (("network", "finney"), ("tier", "local")))]
    assert purged >= len(by_liar)
    # what it answered before is read again from the honest nodes, right
    again = {k: await _read(stages, k) for k in keys}
    assert all(v == _value(k, False) for k, (v, _, _) in again.items())
    assert all(again[k][2] == "MISS" and again[k][1] != liar for k in by_liar)
    assert all(again[k][2] == "HIT" for k in keys if k not in by_liar)  # the others stay
