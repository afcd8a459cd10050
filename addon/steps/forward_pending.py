"""The forward step: what is still unanswered goes upstream (failover, hedging,
and identical calls in flight shared), and the answers or the failure fill
the call's slots. A read of the state at a block no node can hold is answered
the typed ``state_unavailable`` error instead, before sending or after the
nodes said so (``addon/chain/state_unavailable.py``)."""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Protocol

from addon.chain.routing_hints import hints, state_block
from addon.chain.state import ChainState
from addon.chain.state_unavailable import state_unavailable, unheld
from addon.pipeline.context import RpcContext
from addon.reporting.live_metrics import LiveMetrics
from addon.rpc.jsonrpc import INTERNAL_ERROR, Call, error_obj
from addon.upstream.admission import Admission, BudgetBook
from addon.upstream.batching import GroupKey, UpstreamBatcher, batchable
from addon.upstream.coalesce import Coalescer, coalesce_key
from addon.upstream.failover import error_limit, no_state
from addon.upstream.fair_wait import HEAVY_LINE, FairWait
from addon.upstream.forward import TOO_MANY, Budget, ForwardResult, forward
from addon.upstream.hedge import Hedger
from addon.upstream.pool import UpstreamPool
from addon.upstream.transport import Transport
from common.config import Config

log = logging.getLogger("chainproxy")
_NONE: frozenset[int] = frozenset()  # no call pinned by the proxy


class ForwardPendingNeeds(Protocol):
    """What the forward_pending step reads of the runtime."""

    @property
    def batcher(self) -> UpstreamBatcher | None: ...

    @property
    def budget(self) -> Budget: ...

    @property
    def budgets(self) -> BudgetBook | None: ...

    @property
    def chain(self) -> ChainState: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def coalescer(self) -> Coalescer: ...

    @property
    def config(self) -> Config: ...

    @property
    def fair_waits(self) -> dict[str, FairWait]: ...

    @property
    def hedgers(self) -> dict[str, Hedger]: ...

    @property
    def metrics(self) -> LiveMetrics: ...

    @property
    def pools(self) -> dict[str, UpstreamPool]: ...

    @property
    def transport(self) -> Transport | None: ...


def forward_pending(rpc: RpcContext, rt: ForwardPendingNeeds) -> Awaitable[None] | None:
    """Synchronous when everything came from the cache: a hit creates no
    coroutine and the runner goes on without awaiting (as the other steps)."""
    assert rpc.parsed is not None
    pending = _held_somewhere(rpc, rt, rpc.pending())
    rpc.forwarded = pending
    if not pending:
        return None  # all from the cache (or no node holds the state they read)
    return _forward(rpc, rt, pending)


def _held_somewhere(rpc: RpcContext, rt: ForwardPendingNeeds, pending: list[int]) -> list[int]:
    """The pending calls some node may hold the state for; the others are
    answered ``state_unavailable`` now, no node asked."""
    assert rpc.parsed is not None
    pool = rt.pools.get(rpc.network)
    if pool is None or not pool.upstreams:
        return pending
    out = []
    for i in pending:
        call = rpc.parsed.items[i]
        n = state_block(call, rt.chain.blocks) if isinstance(call, Call) else None
        if n is None or not unheld(pool.upstreams.values(), n, pool.tip):
            out.append(i)
            continue
        ups = pool.upstreams.values()
        rpc.answers[i] = state_unavailable(call.id, rpc.network, n, ups, pool.tip)
    return out


async def _forward(rpc: RpcContext, rt: ForwardPendingNeeds, pending: list[int]) -> None:
    assert rt.transport is not None  # attached by HttpSession.running, before any call
    started = rt.clock()
    result = await _send(rpc, rt, pending, rt.budget)
    if result.pin_missed and rpc.unpinned:
        # No node knew the head the proxy pinned these reads to: the client never
        # asked for that block, so the reads go again as it sent them (one more
        # upstream call at most), within what is left of the deadline.
        _unpin(rpc, rt)
        left = rt.budget.deadline_s - (rt.clock() - started)
        if left > 0:
            first = result.attempts
            result = await _send(rpc, rt, pending, replace(rt.budget, deadline_s=left))
            result = replace(result, attempts=first + result.attempts)
    rpc.result = result
    rpc.attempts = result.attempts
    if result.upstream is not None:
        rpc.upstream, rpc.provider = result.upstream.id, result.upstream.provider
    for eid in result.corrected:
        log.info(
            "%s: %s no longer holds the state a read asked: its horizon corrected", rpc.network, eid
        )
    _fill(rpc, pending, result, rt)
    if result.kind == "soft":
        _state_unavailable(rpc, rt, pending, result)


async def _send(
    rpc: RpcContext, rt: ForwardPendingNeeds, pending: list[int], budget: Budget
) -> ForwardResult:
    """One forward of the pending calls (shared with identical calls in flight)."""
    assert rpc.parsed is not None
    # the pending items are Calls: a BadItem is answered at parse time, never pending
    calls: list[Call] = [rpc.parsed.items[i] for i in pending]  # type: ignore[misc]
    tip = rt.chain.tips.get(rpc.network)
    hint = hints(calls, tip=tip, index=rt.chain.blocks)  # state_block: routed by horizons
    min_block = hint.min_block
    if rpc.min_block is not None:  # pinned to the head: only nodes that have it
        min_block = rpc.min_block if min_block is None else max(min_block, rpc.min_block)
    p = rt.config.proxy
    is_batch = rpc.parsed.is_batch
    unpinned = rpc.unpinned  # the reads the proxy pinned, by their place among the calls
    pinned = frozenset(k for k, i in enumerate(pending) if i in unpinned) if unpinned else _NONE
    admissions: list[Admission] = []

    def send(
        items: Sequence[Call], is_batch: bool, pinned: frozenset[int], budget: Budget
    ) -> Awaitable[ForwardResult]:
        """The calls upstream (these, or an upstream batch with others' beside them)."""
        assert rt.transport is not None
        admission = None
        if rt.budgets is not None:
            light_line = rt.fair_waits[rpc.network]
            heavy_line = rt.fair_waits.get(rpc.network + HEAVY_LINE, light_line)
            own, other = (heavy_line, light_line) if rpc.reserved else (light_line, heavy_line)
            admission = Admission(
                rt.budgets,
                own,
                client=rpc.client,
                max_wait_s=0.0 if rpc.background else p.upstream_limits.max_wait_s,
                clock=rt.clock,
                heavy=bool(rpc.reserved),
                wake=(other,) if other is not own else (),
            )
            admissions.append(admission)
        return forward(
            items,
            is_batch=is_batch,
            pool=rt.pools[rpc.network],
            transport=rt.transport,
            budget=budget,
            clock=rt.clock,
            tip=tip,
            min_block=min_block,
            prefer_archive=hint.prefer_archive,
            # off: it never hedges; nor a heavy read (a race would double its bytes)
            hedger=None if rpc.reserved else rt.hedgers.get(rpc.network),
            admission=admission,
            pinned=pinned,
            state_block=hint.state_block,
            heavy=bool(rpc.reserved),
            hedge_as=kind,
            blocks=rt.chain.blocks if is_batch else None,  # a batch's items judged apart
            split=is_batch and bool(kind),  # an upstream batch (batching.py): ends at an answer
        )

    batcher, kind = rt.batcher, ""
    if (
        batcher is not None
        and not is_batch
        and batchable(calls[0], heavy=bool(rpc.reserved), background=rpc.background)
    ):
        kind = calls[0].method  # its hedge kind (hedge_kind: no state_call is batched)
        group = GroupKey(
            rpc.network, rpc.client, min_block, hint.prefer_archive, hint.state_block,
            bool(pinned), budget, kind, tip,
        )  # fmt: skip

        def start() -> Awaitable[ForwardResult]:
            assert batcher is not None
            return batcher.forward(group, calls[0], send)
    else:

        def start() -> Awaitable[ForwardResult]:
            return send(calls, is_batch, pinned, budget)

    if p.coalesce.enabled:
        key = coalesce_key(rpc.network, calls, is_batch)
        result, coalesced = await rt.coalescer.run(key, start)
        rpc.coalesced = rpc.coalesced or coalesced
        if coalesced:
            rt.metrics.count_extra("chainproxy_coalesced_total", network=rpc.network)
    else:
        result = await start()
    hedged = result.hedged and not rpc.coalesced  # counted once, by the call that sent it
    rpc.hedged = rpc.hedged or hedged
    if hedged:
        rt.metrics.count_extra("chainproxy_hedged_total", network=rpc.network)
    for admission in admissions:  # the call that sent it (not a coalesced follower)
        if admission.waited:
            rt.metrics.count_extra("chainproxy_upstream_waits_total", network=rpc.network)
        pool = rt.pools[rpc.network]
        now = rt.clock()
        for a in result.attempts:
            u = pool.upstreams.get(a.endpoint) if a.reason in TOO_MANY else None
            if u is not None and u.backoff_until > now:  # it pauses (pool.throttled)
                reason = "overloaded" if a.reason == "http-503" else a.reason
                rt.metrics.count_extra(
                    "chainproxy_upstream_backoffs_total", endpoint=a.endpoint, reason=reason
                )
    return result  # (a refusal for capacity is counted with its flow: live_metrics.count_flow)


def _unpin(rpc: RpcContext, rt: ForwardPendingNeeds) -> None:
    """Back to the reads as the client sent them; the head is not pinned to again."""
    assert rpc.parsed is not None and rpc.unpinned is not None and rpc.pinned is not None
    items = list(rpc.parsed.items)
    for i, call in rpc.unpinned.items():
        items[i] = call
        rpc.plans.pop(i, None)  # the answer is not that block's: not cached under it
    rt.chain.best.distrust(rpc.network, rpc.pinned)
    log.info("%s: no node knew head %s pinned to: sent unpinned", rpc.network, rpc.pinned)
    rt.metrics.count_extra("chainproxy_pin_fallbacks_total", network=rpc.network)
    rpc.parsed = replace(rpc.parsed, items=tuple(items))
    rpc.pinned, rpc.min_block, rpc.unpinned, rpc.pin_missed = None, None, None, True


def _state_unavailable(
    rpc: RpcContext, rt: ForwardPendingNeeds, pending: list[int], result: ForwardResult
) -> None:
    """Nodes answered that they have no state for what a call reads: once no
    other node may hold it (those that said so are corrected by now), or, at
    a block of unknown height, once every node was asked, the call gets the
    typed error instead of the last node's words."""
    assert rpc.parsed is not None
    pool = rt.pools[rpc.network]
    asked = {a.endpoint for a in result.attempts}
    for i in pending:
        call, answer = rpc.parsed.items[i], rpc.answers[i]
        if not isinstance(call, Call) or answer is None:
            continue
        reason = no_state(call, answer, pool.tip)
        if reason is None:
            continue
        n = state_block(call, rt.chain.blocks)
        if n is not None:
            if not unheld(pool.upstreams.values(), n, pool.tip):
                continue
        elif reason != "state-discarded" or not asked >= set(pool.upstreams):
            continue
        rpc.answers[i] = state_unavailable(
            call.id, rpc.network, n, pool.upstreams.values(), pool.tip
        )


def _fill(
    rpc: RpcContext, pending: list[int], result: ForwardResult, rt: ForwardPendingNeeds
) -> None:
    """Put the upstream answers (or the failure) into the pending slots; on a
    failure, the HTTP status a single call gets."""
    assert rpc.parsed is not None
    if result.answers is not None:
        capacity = result.kind == "capacity"  # a batch: the items every node refused
        for i, answer in zip(pending, result.answers, strict=True):
            call_id = rpc.parsed.items[i].id
            if capacity and error_limit(answer):
                refused, why = _capacity(rpc.network, result, _attempts(result))
                rpc.answers[i] = error_obj(call_id, INTERNAL_ERROR, refused, why)
            else:
                rpc.answers[i] = {**answer, "jsonrpc": "2.0", "id": call_id}
        return
    attempts = _attempts(result)
    data: dict[str, object] = {"attempts": attempts}
    if result.kind == "capacity":
        status = 503
        message, data = _capacity(rpc.network, result, attempts)
    elif result.kind == "no-upstream":
        status, message = 503, f"no upstream available for network {rpc.network}"
    elif result.kind == "deadline":
        # the deadline passed, or every node tried timed out before it did (a
        # gateway timeout either way): both limits named, neither claimed
        status, b = 504, rt.budget
        message = (
            f"no upstream answered in time: {len(attempts)} attempt(s) timed out "
            f"(attempt_timeout_s {b.attempt_timeout_s:g}, deadline_s {b.deadline_s:g})"
        )
    else:
        status = 502
        message = f"all {len(attempts)} upstream attempt(s) failed"
    if status in (502, 504):
        message += _paused(rt.pools[rpc.network], data)
    log.warning("#%s %s %s: %s %s", rpc.request_id, rpc.network, status, message, attempts)
    for i in pending:
        rpc.answers[i] = error_obj(rpc.parsed.items[i].id, INTERNAL_ERROR, message, data)
    rpc.error_status = status


def _attempts(result: ForwardResult) -> list[dict[str, object]]:
    """What each node tried said, for an error's ``data`` (built only for one)."""
    return [a.as_dict() for a in result.attempts]


def _paused(pool: UpstreamPool, data: dict[str, object]) -> str:
    """Nodes pausing at their own ``Retry-After`` (not asked for it, or asked
    and answered 429 with one): named, with when the first takes calls again
    (``data.retry_after``, the reply's ``Retry-After``), so a client and an
    operator learn when capacity returns."""
    paused = pool.paused(set())
    if not paused:
        return ""
    data["paused"] = {uid: math.ceil(s) for uid, s in sorted(paused.items())}
    data["retry_after"] = first = max(1, math.ceil(min(paused.values())))
    names = ", ".join(sorted(paused))
    return f"; {len(paused)} node(s) paused by their Retry-After ({names}), back in {first} s"


def _capacity(
    network: str, result: ForwardResult, attempts: list[dict[str, object]]
) -> tuple[str, dict[str, object]]:
    """The message and data of a call refused for the nodes' capacity (their
    budgets spent, or every node tried refused it for its limits)."""
    retry = result.retry_after
    message = (
        f"upstream capacity exhausted for network {network}: every node's "
        f"request budget is in use or the node refused for its limits; retry in {retry} s"
    )
    return message, {"policy": "upstream_capacity", "retry_after": retry, "attempts": attempts}
