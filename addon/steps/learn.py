"""The learn step: block heights and the best head, from the upstream's answers,
before the client sees them (archive routing, head pinning)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from addon.chain.head_book import HASH_METHODS
from addon.chain.state import ChainState
from addon.pipeline.context import RpcContext
from addon.rpc.blocks import HEADER_METHODS, answered_header
from addon.rpc.jsonrpc import Call


class LearnNeeds(Protocol):
    """What the learn step reads of the runtime."""

    @property
    def chain(self) -> ChainState: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    def new_head(self, network: str) -> None: ...


def learn(rpc: RpcContext, rt: LearnNeeds) -> None:
    """Heights of block hashes, from the upstream's results (for archive routing),
    and the best head with its hash (for head pinning), before the client sees it;
    a head hash shown without its header pauses pinning (``addon/chain/head_book.py``)."""
    if rpc.hits and rt.chain.best.unseen(rpc.network):
        _learn_cached_headers(rpc, rt)
    if rpc.result is None or rpc.result.answers is None:
        return
    assert rpc.parsed is not None
    now = rt.clock()
    finalized = rt.chain.finalized.get(rpc.network)
    for i in rpc.forwarded:
        item, answer = rpc.parsed.items[i], rpc.answers[i]
        if isinstance(item, Call) and answer is not None and "result" in answer:
            rt.chain.blocks.learn(item, answer["result"], finalized)
            if item.method in HEADER_METHODS:
                header = answered_header(item.method, answer["result"])
                if rt.chain.best.learn(rpc.network, header, now, block_hash=item.facts.hash_at(0)):
                    rt.new_head(rpc.network)
            elif item.method in HASH_METHODS and isinstance(answer["result"], str):
                block_hash = answer["result"]
                rt.chain.best.shown(rpc.network, block_hash, now, rt.chain.blocks.get(block_hash))


def _learn_cached_headers(rpc: RpcContext, rt: LearnNeeds) -> None:
    """While pinning waits for a shown hash's header: that header may come from
    the cache (another proxy process fetched it), which is as good."""
    assert rpc.parsed is not None
    now = rt.clock()
    for i in rpc.hits:
        item, answer = rpc.parsed.items[i], rpc.answers[i]
        if isinstance(item, Call) and item.method in HEADER_METHODS and answer is not None:
            header = answered_header(item.method, answer.get("result"))
            rt.chain.best.learn(rpc.network, header, now, block_hash=item.facts.hash_at(0))
