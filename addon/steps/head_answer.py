"""The head-answer step: ``chain_getHead`` without a block number is answered
with the network's best head while a new-heads subscription keeps the proxy's
view of it current (``addon/subs/head_watch.py``), as a cache hit; otherwise
it goes on to a node, and the watch hears that it was asked."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from addon.chain.state import ChainState
from addon.pipeline.context import RpcContext
from addon.rpc.jsonrpc import Call
from addon.subs.head_watch import HeadWatch
from common.config import Config

GET_HEAD = "chain_getHead"


class HeadAnswerNeeds(Protocol):
    """What the head_answer step reads of the runtime."""

    @property
    def chain(self) -> ChainState: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def config(self) -> Config: ...

    @property
    def head_watch(self) -> HeadWatch: ...


def head_answer(rpc: RpcContext, rt: HeadAnswerNeeds) -> None:
    assert rpc.parsed is not None
    items = rpc.parsed.items
    for i in rpc.pending():
        call = items[i]
        if isinstance(call, Call) and call.method == GET_HEAD and _best_asked(call.params):
            break
    else:
        return  # most calls: not this one
    cfg = rt.config.proxy.head_pinning
    if not (cfg.enabled and cfg.answer_head):
        return
    watch = rt.head_watch
    head = None
    if watch.live(rpc.network):
        head = rt.chain.best.fresh(
            rpc.network,
            rt.clock(),
            max_age_s=cfg.max_age_s,
            probe_tip=rt.chain.tips.get(rpc.network),
        )
    if head is None:
        watch.asked(rpc.network)
        return
    watch.answered(rpc.network)
    for i in rpc.pending():
        call = items[i]
        if isinstance(call, Call) and call.method == GET_HEAD and _best_asked(call.params):
            rpc.answers[i] = {"jsonrpc": "2.0", "id": call.id, "result": head.hash}
            rpc.hits.add(i)
    if not rpc.pending():
        rpc.cache = "HIT"


def _best_asked(params: object) -> bool:
    """``[]``, ``[null]`` or no params: the best block (a number asks for another)."""
    return params is None or params == [] or params == [None]
