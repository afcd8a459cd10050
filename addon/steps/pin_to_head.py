"""The two steps of the best head (``addon/chain/head_book.py``):

* ``head_answer``: ``chain_getHead`` (or ``chain_getBlockHash``) without a
  block number is answered with the network's best head while a new-heads
  subscription keeps the proxy's view of it current
  (``addon/subs/head_watch.py``), as a cache hit; with
  ``head_pinning.pin_headers``, ``chain_getHeader`` or ``chain_getBlock``
  without a hash is pinned to that head's hash, so it is a cache hit once one
  client asked it at that block; otherwise they go on to a node, and the
  watch hears that it was asked.
* ``pin_to_head``: hash-optional reads sent without a block hash get the hash
  of the network's best block (``addon/chain/head_pinning.py``), when this
  proxy knows a fresh one; otherwise they go on unpinned, as without the
  feature. Runs before the cache, so a pinned read can be a hit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from addon.chain.demand import Demand
from addon.chain.head_book import Head
from addon.chain.head_pinning import HASH_POSITION, pin
from addon.chain.state import ChainState
from addon.pipeline.context import RpcContext
from addon.quota.sizes import AnswerSizes
from addon.rpc.jsonrpc import Call, Item
from addon.subs.head_watch import HeadWatch
from common.config import Config


class HeadNeeds(Protocol):
    """What both steps of the best head read of the runtime."""

    @property
    def chain(self) -> ChainState: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def config(self) -> Config: ...


class PinToHeadNeeds(HeadNeeds, Protocol):
    """What the pin_to_head step reads of the runtime."""

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
            head = _fresh_head(rt, rpc.network, cfg.max_age_s)
            if head is None:
                return  # no fresh head known: everything goes as sent
        pinned = pin(call, head.hash, cfg.exclude)
        if pinned is not None:
            if items is None:
                items = list(parsed.items)
                if rpc.unpinned is None:  # (head_answer may have pinned a header)
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


# the best block's hash, answered here; its header or block, pinned to that hash
HEAD_HASH = frozenset({"chain_getHead", "chain_getBlockHash"})
HEAD_BLOCK = frozenset({"chain_getHeader", "chain_getBlock"})


class HeadAnswerNeeds(HeadNeeds, Protocol):
    """What the head_answer step reads of the runtime."""

    @property
    def head_watch(self) -> HeadWatch: ...


def head_answer(rpc: RpcContext, rt: HeadAnswerNeeds) -> None:
    assert rpc.parsed is not None
    parsed = rpc.parsed
    cfg = rt.config.proxy.head_pinning
    # (head_pinning.exclude: methods never pinned, a header or block included)
    at_head = HEAD_HASH | (HEAD_BLOCK - cfg.exclude) if cfg.pin_headers else HEAD_HASH
    asked: list[tuple[int, Call]] = [
        (i, call)
        for i in rpc.pending()
        if isinstance(call := parsed.items[i], Call)
        and call.method in at_head
        and _best_asked(call.params)
    ]
    if not asked:
        return  # most calls: not these
    if not (cfg.enabled and cfg.answer_head):
        return
    watch = rt.head_watch
    head = None
    if watch.live(rpc.network):
        head = _fresh_head(rt, rpc.network, cfg.max_age_s)
    if head is None:
        watch.asked(rpc.network)
        return
    watch.answered(rpc.network)
    items: list[Item] | None = None  # copied only when a header is pinned
    for i, call in asked:
        if call.method in HEAD_HASH:
            rpc.answers[i] = {"jsonrpc": "2.0", "id": call.id, "result": head.hash}
            rpc.hits.add(i)
            continue
        # the best block's header (a poller's question): that of the head, by
        # its hash: cacheable, and the same block reads are pinned to
        if items is None:
            items = list(parsed.items)
            rpc.unpinned = {}
        items[i] = Call(call.id, call.method, [head.hash])
        assert rpc.unpinned is not None
        rpc.unpinned[i] = call  # what to send if no node knows the head
    if items is not None:
        rpc.pinned, rpc.min_block = head.hash, head.number
        rpc.parsed = replace(parsed, items=tuple(items))
    if not rpc.pending():
        rpc.cache = "HIT"


def _best_asked(params: object) -> bool:
    """``[]``, ``[null]`` or no params: the best block (a number asks for another)."""
    return params is None or params == [] or params == [None]


def _fresh_head(rt: HeadNeeds, network: str, max_age_s: float) -> Head | None:
    """The best head while it may be used: both steps' one rule (``HeadBook.fresh``)."""
    now = rt.clock()
    # a tip the sidecar stopped refreshing says nothing of the chain now (the
    # head would be dropped as "moved back" at every block)
    tip = rt.chain.current_tip(network, now, max_age_s)
    return rt.chain.best.fresh(network, now, max_age_s=max_age_s, probe_tip=tip)
