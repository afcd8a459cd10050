"""The cache look-up step: block-pinned reads are answered from the edge cache
(local tier, then the shared one in one round trip) with the caller's own id;
each cacheable call keeps its plan for ``cache_store``."""

from __future__ import annotations

from typing import Any, Protocol

from addon.cache.per_runtime import runtime_entry
from addon.cache.redis_tier import SharedCacheTier
from addon.cache.rules import answer_from, plan
from addon.cache.store import CacheStore
from addon.chain.state import ChainState
from addon.pipeline.context import RpcContext
from addon.rpc.jsonrpc import Call
from addon.rpc.later import Later
from common.config import Config


class CacheLookupNeeds(Protocol):
    """What the cache_lookup step reads of the runtime."""

    @property
    def cache(self) -> CacheStore | None: ...

    @property
    def chain(self) -> ChainState: ...

    @property
    def config(self) -> Config: ...

    @property
    def shared_cache(self) -> SharedCacheTier | None: ...


def cache_lookup(rpc: RpcContext, rt: CacheLookupNeeds) -> Later[Any] | None:
    """Local tier first; the calls it missed ask the shared tier (Redis) in one
    round trip when one is configured and up (a ``Later``: no coroutine)."""
    if rt.cache is None:
        return None
    assert rpc.parsed is not None
    extra = rt.config.proxy.cache.methods
    finalized = rt.chain.finalized.get(rpc.network)
    missed: list[int] = []
    for i in rpc.pending():
        call = rpc.parsed.items[i]
        if not isinstance(call, Call):
            continue
        p = plan(rpc.network, call, extra=extra, finalized=finalized)
        if p is None:
            continue
        rpc.plans[i] = p
        values = []
        for key in p.keys:
            value = rt.cache.get(key)
            if value is None:
                break
            values.append(value)
        else:
            _hit(rpc, i, call, values)
            continue
        by_runtime = runtime_entry(rpc.network, call, rt.cache)
        if by_runtime is not None:
            metadata = rt.cache.get(by_runtime)
            if metadata is not None:
                _hit(rpc, i, call, [metadata])
                continue
        missed.append(i)
    shared = rt.shared_cache
    if missed and shared is not None:
        keys = [key for i in missed for key in rpc.plans[i].keys]
        found = shared.lookup(keys, fill=rt.cache)  # None: Redis down, the local tier alone
        if found is not None:
            # applied as the reply is read; the runner goes on from there
            found.then(lambda done: _shared_hits(rpc, missed, done.result()))
            return found
    _mark(rpc)
    return None


def _shared_hits(rpc: RpcContext, missed: list[int], values: list[Any | None] | None) -> None:
    assert rpc.parsed is not None
    if values is not None:
        at = 0
        for i in missed:
            n = len(rpc.plans[i].keys)
            mine, at = values[at : at + n], at + n
            if any(v is None for v in mine):
                continue
            call = rpc.parsed.items[i]
            assert isinstance(call, Call)
            _hit(rpc, i, call, mine)
    _mark(rpc)


def _hit(rpc: RpcContext, i: int, call: Call, values: list[Any]) -> None:
    rpc.answers[i] = {"jsonrpc": "2.0", "id": call.id, "result": answer_from(rpc.plans[i], values)}
    rpc.hits.add(i)


def _mark(rpc: RpcContext) -> None:
    if rpc.hits and not rpc.pending():
        rpc.cache = "HIT"
