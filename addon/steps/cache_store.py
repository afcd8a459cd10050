"""The cache store step: what the upstream answered is stored under the plans
``cache_lookup`` made (results only: never errors, null or soft answers); a
sampled share of answers at finalized blocks is cross-checked afterwards."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from addon.cache.per_runtime import runtime_entry
from addon.cache.redis_tier import SharedCacheTier
from addon.cache.rules import entries_to_store
from addon.cache.store import CacheStore
from addon.chain.routing_hints import state_block
from addon.chain.state import ChainState
from addon.pipeline.context import RpcContext
from addon.rpc.jsonrpc import Call
from addon.upstream.admission import BudgetBook
from addon.upstream.cross_check import CrossChecker, Sample
from addon.upstream.pool import UpstreamPool
from addon.upstream.transport import Transport


class CacheStoreNeeds(Protocol):
    """What the cache_store step reads of the runtime."""

    @property
    def budgets(self) -> BudgetBook | None: ...

    @property
    def cache(self) -> CacheStore | None: ...

    @property
    def chain(self) -> ChainState: ...

    @property
    def cross_checker(self) -> CrossChecker | None: ...

    @property
    def pools(self) -> dict[str, UpstreamPool]: ...

    @property
    def shared_cache(self) -> SharedCacheTier | None: ...

    @property
    def transport(self) -> Transport | None: ...


def cache_store(rpc: RpcContext, rt: CacheStoreNeeds) -> None:
    """Cache what the upstream answers allow (results only: never errors or null).
    A soft result is only the best of poor answers (e.g. another block than the
    hash asked for): never cached."""
    if rt.cache is None or rpc.result is None or rpc.result.kind != "ok":
        return
    for i in rpc.forwarded:
        p, answer = rpc.plans.get(i), rpc.answers[i]
        if p is None or answer is None or "result" not in answer:
            continue
        entries = entries_to_store(p, answer["result"])
        call = rpc.parsed.items[i] if rpc.parsed is not None else None
        if entries and isinstance(call, Call):
            by_runtime = runtime_entry(rpc.network, call, rt.cache)
            if by_runtime is not None:
                # one copy per runtime, not one per block (hundreds of KB each)
                entries = [(by_runtime, answer["result"])]
        for key, value in entries:
            rt.cache.set(key, value)
            if rt.shared_cache is not None:
                rt.shared_cache.put(key, value)
        checker = rt.cross_checker
        if checker is not None and isinstance(call, Call) and checker.wanted():
            _cross_check(rpc, rt, call, answer["result"], tuple(k for k, _ in entries))


def _cross_check(
    rpc: RpcContext, rt: CacheStoreNeeds, call: Call, result: Any, keys: tuple[str, ...]
) -> None:
    """A sampled answer at a finalized block, by hash: checked against another
    node after the client has it (``addon/upstream/cross_check.py``)."""
    assert rt.cross_checker is not None and rt.transport is not None
    hashes = call.facts.hashes
    finalized = rt.chain.finalized.get(rpc.network)
    height = rt.chain.blocks.get(hashes[-1][1]) if hashes else None
    if rpc.upstream is None or finalized is None or height is None or height > finalized:
        return  # not known final: a node behind or on a fork may rightly differ
    sample = Sample(
        rpc.network, call, rpc.upstream, result, keys, state_block(call, rt.chain.blocks)
    )
    rt.cross_checker.submit(
        sample, rt.pools[rpc.network], rt.transport, rt.budgets, lambda ks: _forget(rt, ks)
    )


def _forget(rt: CacheStoreNeeds, keys: Sequence[str]) -> None:
    """Entries a cross-check found wrong, or could not vouch for."""
    for key in keys:
        if rt.cache is not None:
            rt.cache.delete(key)
        if rt.shared_cache is not None:
            rt.shared_cache.delete(key)
