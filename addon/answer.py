"""The steps after admission and the cache: forward what is still unanswered
(with failover), learn block heights from the answers, record usage, answer."""

from __future__ import annotations

import logging
from collections.abc import Awaitable

from addon.blocks import HEADER_METHODS, answered_header
from addon.coalesce import coalesce_key
from addon.context import Reply, RpcContext
from addon.forward import ForwardResult, forward
from addon.heads import HASH_METHODS
from addon.jsonrpc import INTERNAL_ERROR, Call, error_obj
from addon.pinning import hints
from addon.runtime import Runtime

log = logging.getLogger("chainproxy")


async def forward_pending(rpc: RpcContext, rt: Runtime) -> None:
    assert rpc.parsed is not None
    pending = rpc.pending()
    rpc.forwarded = pending
    if not pending:
        return  # all from the cache
    assert rt.transport is not None  # attached by HttpSession.running, before any call
    calls: list[Call] = [rpc.parsed.items[i] for i in pending]  # type: ignore[misc]
    tip = rt.tips.get(rpc.network)
    hint = hints(calls, tip=tip, index=rt.blocks)
    min_block = hint.min_block
    if rpc.min_block is not None:  # pinned to the head: only nodes that have it
        min_block = rpc.min_block if min_block is None else max(min_block, rpc.min_block)
    p = rt.config.proxy
    is_batch = rpc.parsed.is_batch

    def start() -> Awaitable[ForwardResult]:
        assert rt.transport is not None
        return forward(
            calls,
            is_batch=is_batch,
            pool=rt.pools[rpc.network],
            transport=rt.transport,
            budget=rt.budget,
            clock=rt.clock,
            tip=tip,
            min_block=min_block,
            prefer_archive=hint.prefer_archive,
            hedger=rt.hedgers.get(rpc.network),  # off: it never hedges
        )

    if p.coalesce.enabled:
        key = coalesce_key(rpc.network, calls, is_batch)
        result, rpc.coalesced = await rt.coalescer.run(key, start)
        if rpc.coalesced:
            rt.metrics.count_extra("chainproxy_coalesced_total", network=rpc.network)
    else:
        result = await start()
    rpc.hedged = result.hedged and not rpc.coalesced  # counted once, by the call that sent it
    if rpc.hedged:
        rt.metrics.count_extra("chainproxy_hedged_total", network=rpc.network)
    rpc.result = result
    rpc.attempts = result.attempts
    if result.upstream is not None:
        rpc.upstream, rpc.provider = result.upstream.id, result.upstream.provider
    _fill(rpc, pending, result, rt)


def _fill(rpc: RpcContext, pending: list[int], result: ForwardResult, rt: Runtime) -> None:
    """Put the upstream answers (or the failure) into the pending slots; on a
    failure, the HTTP status a single call gets."""
    assert rpc.parsed is not None
    if result.answers is not None:
        for i, answer in zip(pending, result.answers, strict=True):
            rpc.answers[i] = {**answer, "jsonrpc": "2.0", "id": rpc.parsed.items[i].id}
        return
    attempts = [a.as_dict() for a in result.attempts]
    if result.kind == "no-upstream":
        status, message = 503, f"no upstream available for network {rpc.network}"
    elif result.kind == "deadline":
        status = 504
        message = f"deadline of {rt.budget.deadline_s:g}s passed before an upstream answered"
    else:
        status = 502
        message = f"all {len(attempts)} upstream attempt(s) failed"
    log.warning("%s %s: %s %s", rpc.network, status, message, attempts)
    for i in pending:
        rpc.answers[i] = error_obj(
            rpc.parsed.items[i].id, INTERNAL_ERROR, message, {"attempts": attempts}
        )
    rpc.error_status = status


def learn(rpc: RpcContext, rt: Runtime) -> None:
    """Heights of block hashes, from the upstream's results (for archive routing),
    and the best head with its hash (for head pinning), before the client sees it;
    a head hash shown without its header pauses pinning (``addon/heads.py``)."""
    if rpc.hits and rt.heads.unseen(rpc.network):
        _learn_cached_headers(rpc, rt)
    if rpc.result is None or rpc.result.answers is None:
        return
    assert rpc.parsed is not None
    now = rt.clock()
    for i in rpc.forwarded:
        item, answer = rpc.parsed.items[i], rpc.answers[i]
        if isinstance(item, Call) and answer is not None and "result" in answer:
            rt.blocks.learn(item, answer["result"])
            if item.method in HEADER_METHODS:
                header = answered_header(item.method, answer["result"])
                rt.heads.learn(rpc.network, header, now, block_hash=item.facts.hash_at(0))
            elif item.method in HASH_METHODS and isinstance(answer["result"], str):
                block_hash = answer["result"]
                rt.heads.shown(rpc.network, block_hash, now, rt.blocks.get(block_hash))


def _learn_cached_headers(rpc: RpcContext, rt: Runtime) -> None:
    """While pinning waits for a shown hash's header: that header may come from
    the cache (another proxy process fetched it), which is as good."""
    assert rpc.parsed is not None
    now = rt.clock()
    for i in rpc.hits:
        item, answer = rpc.parsed.items[i], rpc.answers[i]
        if isinstance(item, Call) and item.method in HEADER_METHODS and answer is not None:
            header = answered_header(item.method, answer.get("result"))
            rt.heads.learn(rpc.network, header, now, block_hash=item.facts.hash_at(0))


def record(rpc: RpcContext, rt: Runtime) -> None:
    """One usage record per call that was answered from the cache or upstream,
    or that opened a subscription (refusals are not proxied calls). A call
    counts as an error when its answer is a JSON-RPC error, the proxy's or the
    upstream's."""
    if rpc.parsed is None:
        return
    latency_ms = rpc.stop(rt.clock()) * 1000
    failover = rpc.failover
    endpoint = rpc.upstream or (rpc.attempts[-1].endpoint if rpc.attempts else None)
    for i in (*rpc.hits, *rpc.forwarded, *rpc.subscribed):
        item, answer = rpc.parsed.items[i], rpc.answers[i]
        if not isinstance(item, Call) or answer is None:
            continue
        hit = i in rpc.hits
        sub = i in rpc.subscribed
        rt.usage.record(
            network=rpc.network,
            method=item.method,
            endpoint=None if hit else rpc.subscribed[i] if sub else endpoint,
            latency_ms=latency_ms,
            error="error" in answer,
            failover=failover and not hit and not sub,
            cache_hit=hit,
        )


def respond(rpc: RpcContext, rt: Runtime) -> None:
    assert rpc.parsed is not None
    if rpc.error_status is not None and not rpc.parsed.is_batch:
        rpc.reply = Reply(rpc.error_status, rpc.answers[0], "error")
        return
    headers = [("X-Cache", rpc.cache)]
    if rpc.upstream:
        headers.append(("X-Chainproxy-Upstream", rpc.upstream))
        headers.append(("X-Chainproxy-Attempts", str(len(rpc.attempts))))
    if rpc.pinned:
        headers.append(("X-Chainproxy-Pinned", rpc.pinned))
    if rpc.coalesced:
        headers.append(("X-Chainproxy-Coalesced", "1"))
    if rpc.hedged:
        headers.append(("X-Chainproxy-Hedged", "1"))
    doc = rpc.answers if rpc.parsed.is_batch else rpc.answers[0]
    rpc.reply = Reply(200, doc, "ok", tuple(headers))
