"""An attempt's end reported to its node's pool and budget: an answer or a
failure (``report_failure``: "too many requests" pauses the node, anything
else counts against its health), an attempt gone without an outcome
(``abandon``: no verdict), and an attempt a hedge outraced that finished
unheard in the background (``settle_outraced``; ``leave_running`` when a
call's forward ends). The forward loop (``addon/upstream/forward.py``) is
their one user."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from addon.chain.horizons import correct
from addon.chain.routing_hints import state_block
from addon.rpc.blocks import BlockIndex
from addon.rpc.jsonrpc import Call
from addon.upstream.admission import Admission
from addon.upstream.budgets import Ticket
from addon.upstream.failover import CAPACITY, assess, judge_answer
from addon.upstream.hedge import finish_unheard
from addon.upstream.pool import Upstream, UpstreamPool
from addon.upstream.transport import TransportError


@dataclass(frozen=True, slots=True)
class Sent:
    """An attempt under way: where, since when, for how long, on whose budget."""

    upstream: Upstream
    start: float
    timeout: float
    ticket: Ticket | None
    heavy: bool = False  # a read priced by its bytes: counted apart at its node


def abandon(
    pool: UpstreamPool, admission: Admission | None, sent: Sent, clock: Callable[[], float]
) -> None:
    """The attempt ended without an outcome (cancelled): no health verdict."""
    if sent.heavy:
        pool.heavy_ended(sent.upstream)
    if sent.ticket is not None and admission is not None:
        admission.release(sent.ticket)
    pool.abandoned(sent.upstream, (clock() - sent.start) * 1000)


def report_failure(
    pool: UpstreamPool,
    admission: Admission | None,
    upstream: Upstream,
    latency_ms: float,
    reason: str,
    retry_after: float | None,
) -> None:
    """A failed attempt: "too many requests" (a 429, a 503 with Retry-After, or
    a node's limit said in a JSON-RPC error: ``failover.CAPACITY``) pauses the
    node, and a limit teaches it a rate (with budgets kept); anything else
    counts against its health. A 429 without ``Retry-After`` from a node that
    learns a rate does not pause it: the rate, cut, holds back its excess and
    the rest of its capacity keeps being used (a pause put its whole share on
    the other nodes, past their limits in turn); only a 429 that taught no
    rate (a trickle) pauses it."""
    budgets = None if admission is None else admission.budgets
    if (
        budgets is not None
        and reason == "rate-limited"
        and retry_after is None
        and budgets.learns(upstream.id)
    ):
        pool.refused(upstream, latency_ms)
        budgets.rate_limited(upstream.id, lambda: pool.pause(upstream, None, reason))
        return
    if admission is not None and (reason in CAPACITY or retry_after is not None):
        pool.throttled(upstream, latency_ms, retry_after, reason)
        if reason in CAPACITY:  # a limit teaches a rate; a 503 only pauses the node
            admission.budgets.rate_limited(upstream.id)
    else:
        pool.failed(upstream, latency_ms)


def settle_outraced(
    sent: Sent,
    pool: UpstreamPool,
    admission: Admission | None,
    clock: Callable[[], float],
    calls: Sequence[Call],
    is_batch: bool,
    tip: int | None,
    task: asyncio.Task[tuple[int, bytes]],
) -> None:
    """An outraced attempt ended, unheard: its ticket is released and the pool
    learns its real latency and outcome (not the hedge's delay)."""
    if task.cancelled():
        abandon(pool, admission, sent, clock)
        return
    if sent.heavy:  # never raced today (a heavy read is not hedged); counted all the same
        pool.heavy_ended(sent.upstream)
    if sent.ticket is not None and admission is not None:
        admission.release(sent.ticket)
    latency = (clock() - sent.start) * 1000
    error = task.exception()  # retrieved here, whatever it is: nobody else awaits it
    if error is None:
        verdict = assess(*task.result(), calls, is_batch=is_batch, tip=tip)
        if verdict.verdict != "hard":
            pool.succeeded(sent.upstream, latency)
            return
        reason, retry_after = verdict.reason, None
    elif isinstance(error, TransportError):
        reason, retry_after = error.reason, error.retry_after
    else:  # a closed session: no verdict on the node
        pool.abandoned(sent.upstream, latency)
        return
    report_failure(pool, admission, sent.upstream, latency, reason, retry_after)


def leave_running(
    running: Mapping[asyncio.Task[tuple[int, bytes]], Sent],
    won: bool,
    pool: UpstreamPool,
    admission: Admission | None,
    clock: Callable[[], float],
    calls: Sequence[Call],
    is_batch: bool,
    tip: int | None,
) -> None:
    """A call's forward ended with attempts still running: when it ``won``, the
    attempts a hedge outraced finish in the background (``settle_outraced``);
    otherwise (the flow itself was cancelled, a pin miss) they are cancelled."""
    for task, sent in running.items():
        if won:
            settle_it = partial(settle_outraced, sent, pool, admission, clock, calls, is_batch, tip)
            finish_unheard(task, sent.timeout, settle_it)
        else:
            task.cancel()
            abandon(pool, admission, sent, clock)


def correct_items(
    upstream: Upstream,
    calls: Sequence[Call],
    answers: Sequence[dict[str, Any]],
    tip: int | None,
    blocks: BlockIndex,
) -> bool:
    """A batch's items that said the node has no state at the block they read,
    each with its own block (never one item's error with another's block: an
    unknown hash beside a read at genesis once marked an archive as holding
    nothing up to genesis). True when a correction is news."""
    news = False
    for call, answer in zip(calls, answers, strict=True):
        verdict, reason = judge_answer(call, answer, tip)
        n = state_block(call, blocks) if verdict == "soft" else None
        if n is not None and correct(upstream, n, reason):
            news = True
    return news


def pin_holder(pool: UpstreamPool, tried: set[str], n: int | None) -> bool:
    """Whether a node not tried yet is known to be at height ``n`` (the head
    the proxy pinned a read to)."""
    return n is not None and any(
        u.best is not None and u.best >= n and u.id not in tried for u in pool.upstreams.values()
    )
