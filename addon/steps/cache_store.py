"""The cache store step: what the upstream answered is stored under the plans
``cache_lookup`` made (results only: never errors, null or soft answers); a
sampled share of answers at finalized blocks is cross-checked afterwards.

A sampled read at a hash this proxy cannot tell is final (never seen, or no
one said it is its height's canonical block) is answered as any read, and its
check decided once the hash's finality is looked up (``addon/chain/finality.py``,
after the answer: the look-up costs the client nothing, and only sampled reads
pay for one); from then on the hash is known."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

from addon.cache.per_runtime import runtime_entry
from addon.cache.purge import NodePurges
from addon.cache.redis_tier import SharedCacheTier
from addon.cache.rules import entries_to_store
from addon.cache.store import CacheStore
from addon.chain.finality import FINAL, LOOK_UP, FinalityLookups, verdict
from addon.chain.routing_hints import state_block
from addon.chain.state import ChainState
from addon.pipeline.context import RpcContext
from addon.rpc.jsonrpc import Call
from addon.rpc.new_spec import LegacyCaller
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
    def finality(self) -> FinalityLookups: ...

    @property
    def legacy(self) -> LegacyCaller | None: ...

    @property
    def pools(self) -> dict[str, UpstreamPool]: ...

    @property
    def purges(self) -> NodePurges: ...

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
    filler = rpc.upstream  # the node that answered: its entries go if it is quarantined
    node = rt.pools[rpc.network].upstreams.get(filler) if filler is not None else None
    if node is not None and node.quarantined:
        return  # answered as it was being quarantined: not kept (its purge may be done)
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
            rt.cache.set(key, value, filler)
            if rt.shared_cache is not None:
                rt.shared_cache.put(key, value, filler)
        checker = rt.cross_checker
        if checker is not None and isinstance(call, Call) and checker.wanted():
            _cross_check(rpc, rt, call, answer["result"], tuple(k for k, _ in entries))


def _cross_check(
    rpc: RpcContext, rt: CacheStoreNeeds, call: Call, result: Any, keys: tuple[str, ...]
) -> None:
    """A sampled answer at a finalized block, by hash (or a finalized height's
    hash): checked against another node after the client has it
    (``addon/upstream/cross_check.py``). Not known final: a node behind or on a
    fork may rightly differ, so it is never checked."""
    if rpc.upstream is None or rt.cross_checker is None:
        return
    network = rpc.network
    pool = rt.pools.get(network)
    if pool is None or len(pool.upstreams) < 2:
        # one node: nothing to check it against, so no finality look-up (its
        # upstream calls) for a check that could only be skipped
        rt.cross_checker.count(network, "skipped")
        return
    finalized = rt.chain.finalized.get(network)
    sample = Sample(network, call, rpc.upstream, result, keys)
    heights = call.facts.heights
    if heights is not None:  # chain_getBlockHash(n…): one right answer once n is final
        if heights and finalized is not None and max(heights) <= finalized:
            _submit(rt, sample)
        return
    if not call.facts.hashes:
        return
    block_hash = call.facts.hashes[-1][1]
    height = rpc.min_block if rpc.pinned == block_hash else None  # the head it was pinned to
    said = verdict(rt.chain.blocks, block_hash, finalized, height)
    if said == FINAL:
        _submit(rt, sample)
    elif said == LOOK_UP and rt.legacy is not None:
        looking = rt.finality.start(
            network, block_hash, rt.legacy, lambda: rt.chain.finalized.get(network), height=height
        )
        if looking is not None:
            looking.add_done_callback(lambda done: _looked_up(rt, sample, done))


def _looked_up(rt: CacheStoreNeeds, sample: Sample, done: asyncio.Task[str]) -> None:
    """The hash's finality is known now: the sampled answer is checked if final."""
    if not done.cancelled() and done.result() == FINAL:
        _submit(rt, sample)


def _submit(rt: CacheStoreNeeds, sample: Sample) -> None:
    """The check asks only nodes that may hold the state the call read (its
    block's height is known by now, a look-up's included)."""
    if rt.cross_checker is None or rt.transport is None:
        return  # (a look-up that ended as the process stops)
    network = sample.network
    sample = replace(sample, state_block=state_block(sample.call, rt.chain.blocks))
    rt.cross_checker.submit(
        sample,
        rt.pools[network],
        rt.transport,
        rt.budgets,
        lambda keys: _forget(rt, keys),
        lambda endpoint: rt.purges.start(network, endpoint, rt.cache, rt.shared_cache),
    )


def _forget(rt: CacheStoreNeeds, keys: Sequence[str]) -> None:
    """Entries a cross-check found wrong, or could not vouch for."""
    for key in keys:
        if rt.cache is not None:
            rt.cache.delete(key)
        if rt.shared_cache is not None:
            rt.shared_cache.delete(key)
