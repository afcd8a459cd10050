"""The head-pinning step: hash-optional reads sent without a block hash get
the hash of the network's best block (``addon/chain/head_pinning.py``), when this
proxy knows a fresh one (``addon/chain/head_book.py``); otherwise they go on unpinned,
as without the feature. Runs before the cache, so a pinned read can be a hit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from addon.chain.demand import Demand
from addon.chain.head_pinning import HASH_POSITION, pin
from addon.chain.state import ChainState
from addon.pipeline.context import RpcContext
from addon.quota.sizes import AnswerSizes
from addon.rpc.jsonrpc import Call, Item
from common.config import Config


class PinToHeadNeeds(Protocol):
    """What the pin_to_head step reads of the runtime."""

    @property
    def chain(self) -> ChainState: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def config(self) -> Config: ...

    @property
    def demand(self) -> Demand: ...

    @property
    def sizes(self) -> AnswerSizes: ...


def pin_to_head(rpc: RpcContext, rt: PinToHeadNeeds) -> None:
    cfg = rt.config.proxy.head_pinning
    if not cfg.enabled:
        return
    assert rpc.parsed is not None
    parsed = rpc.parsed
    head = None
    items: list[Item] | None = None  # copied only when something is pinned
    for i in rpc.pending():
        call = parsed.items[i]
        if not isinstance(call, Call) or call.method not in HASH_POSITION:
            continue  # most calls: no head lookup, no copy
        if head is None:
            head = rt.chain.best.fresh(
                rpc.network,
                rt.clock(),
                max_age_s=cfg.max_age_s,
                probe_tip=rt.chain.tips.get(rpc.network),
            )
            if head is None:
                return  # no fresh head known: everything goes as sent
        pinned = pin(call, head.hash, cfg.exclude)
        if pinned is not None:
            if items is None:
                items = list(parsed.items)
                rpc.unpinned = {}
            items[i] = pinned
            assert rpc.unpinned is not None
            rpc.unpinned[i] = call  # what to send if no node knows the head
            if rt.demand.enabled:  # what clients read at every block (pre-warm)
                rt.demand.note(rpc.network, call, head.number, rpc.client, rt.sizes.expected(call))
    if items is not None and head is not None:
        rpc.pinned = head.hash
        rpc.parsed = replace(parsed, items=tuple(items))
        rpc.min_block = head.number  # routing: only nodes that have this block
