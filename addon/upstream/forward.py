"""Forwarding with failover: up to N attempts on distinct upstreams, each with
its own timeout, all within one overall deadline. The caller sees one answer.

An attempt no hedge can race (hedging off, no delay learned yet, no hedge
left) is awaited in the caller's task: no task, no ``asyncio.wait`` (two loop
turns and ~40 µs less a miss). One a hedge may race runs as a task.

When a hedge wins, the slower attempt is not cancelled: it finishes in the
background (bounded by its timeout, its answer discarded, its budget ticket
released at its end) and the pool learns its real latency and outcome.
Cancelled, it taught the pool only the hedge delay (>= 50 ms), so a node at
300 ms kept being chosen once the healthy ones answered in tens of ms (and
aiohttp closes a cancelled request's connection). A cancelled flow still
cancels all of its attempts.

The transport is a small Protocol (``addon/upstream/transport.py``) so the
loop is tested with in-process fakes.
"""

from __future__ import annotations

import asyncio
import math
from asyncio import FIRST_COMPLETED
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from addon.rpc.attempt import Attempt
from addon.rpc.jsonrpc import Call, dumps
from addon.upstream.admission import Admission
from addon.upstream.budgets import Ticket
from addon.upstream.failover import assess
from addon.upstream.hedge import Hedger, finish_unheard
from addon.upstream.pool import Upstream, UpstreamPool

# the transport's names, re-exported: callers import them from here
from addon.upstream.transport import AiohttpTransport as AiohttpTransport
from addon.upstream.transport import Transport, TransportError
from addon.upstream.transport import new_session as new_session

TOO_MANY = frozenset({"rate-limited", "http-503"})  # 429; 503 (a pause if Retry-After)

# What a node answers for a block it does not have (reorged away, not imported
# yet, pruned, or another fork's): for a read the proxy pinned, a miss of the pin.
PIN_MISSES = frozenset({"unknown-block", "state-discarded", "null-pinned", "wrong-block"})

Outcome = tuple[int, bytes] | TransportError


ResultKind = Literal["ok", "soft", "failed", "deadline", "no-upstream", "capacity"]


@dataclass(frozen=True, slots=True)
class ForwardResult:
    kind: ResultKind
    answers: tuple[dict[str, Any], ...] | None  # one per call, in order (ok / soft)
    attempts: tuple[Attempt, ...]
    upstream: Upstream | None  # whose answer it is
    hedged: bool = False  # a second upstream raced a slow first one
    body_bytes: int = 0  # the size of the answer's body as the upstream sent it
    retry_after_s: float = 0.0  # "capacity": when a node's budget is expected to free up
    pin_missed: bool = False  # a node did not know the block the proxy pinned the call to

    @property
    def retry_after(self) -> int:
        """Whole seconds for ``Retry-After`` (at least 1)."""
        return max(1, math.ceil(self.retry_after_s))

    @property
    def failover(self) -> bool:
        return len(self.attempts) > 1


@dataclass(frozen=True, slots=True)
class Budget:
    max_attempts: int
    attempt_timeout_s: float
    deadline_s: float


def outbound_body(calls: Sequence[Call], is_batch: bool) -> bytes:
    """The request sent upstream: the caller's calls renumbered 0..n-1, so answers
    are matched to calls even when the caller reused or nulled ids."""
    objs = [
        {"jsonrpc": "2.0", "id": i, "method": c.method, "params": c.params}
        for i, c in enumerate(calls)
    ]
    return dumps(objs if is_batch else objs[0])


@dataclass(frozen=True, slots=True)
class _Sent:
    """An attempt under way: where, since when, for how long, on whose budget."""

    upstream: Upstream
    start: float
    timeout: float
    ticket: Ticket | None


async def forward(
    calls: Sequence[Call],
    *,
    is_batch: bool,
    pool: UpstreamPool,
    transport: Transport,
    budget: Budget,
    clock: Callable[[], float],
    tip: int | None = None,
    min_block: int | None = None,
    prefer_archive: bool = False,
    hedger: Hedger | None = None,
    admission: Admission | None = None,
    pinned: bool = False,
) -> ForwardResult:
    """Attempts one after the other (failover); with a ``hedger``, an attempt
    not answered within its delay gets a second one racing it on the next-best
    upstream, the first good answer wins and the other finishes unheard. With
    an ``admission``, each attempt takes a place in its node's budget (waiting
    its fair turn if every node's is spent), and a node that answers "too many
    requests" pauses instead of counting as failed."""
    body = outbound_body(calls, is_batch)
    deadline = clock() + budget.deadline_s
    tried: set[str] = set()
    attempts: list[Attempt] = []
    soft: tuple[tuple[dict[str, Any], ...], Upstream, int] | None = None
    by_deadline = False
    hedged = False  # a second upstream was sent the call
    waited = False  # the hedge delay passed once (one hedge per call at most)
    won = False  # an attempt answered "ok": a racer still running was outraced
    running: dict[asyncio.Task[tuple[int, bytes]], _Sent] = {}  # attempts a hedge may race
    if hedger is not None:
        hedger.call()

    async def launch(wait: bool) -> _Sent | None:
        """Choose the next upstream and take its place; ``wait``: for a node's
        budget, if need be (a hedge does not). The caller sends the call."""
        nonlocal by_deadline
        if deadline - clock() <= 0:
            by_deadline = True
            return None
        ticket: Ticket | None = None
        if admission is None:
            upstream = pool.choose(tried, prefer_archive=prefer_archive, min_block=min_block)
        else:
            got = await admission.acquire(
                pool,
                tried,
                calls=len(calls),
                until=deadline,
                wait=wait,
                prefer_archive=prefer_archive,
                min_block=min_block,
            )
            upstream, ticket = got if got is not None else (None, None)
        if upstream is None:
            return None
        remaining = deadline - clock()
        if remaining <= 0:  # the wait for budget took the rest of the deadline
            if ticket is not None and admission is not None:
                admission.release(ticket)
            by_deadline = True
            return None
        tried.add(upstream.id)
        pool.started(upstream)
        return _Sent(upstream, clock(), min(budget.attempt_timeout_s, remaining), ticket)

    def settle(sent: _Sent, outcome: Outcome) -> ForwardResult | None:
        """One attempt's outcome reported; the result to return, or None: go on."""
        nonlocal by_deadline, soft, prefer_archive, won
        upstream = sent.upstream
        if sent.ticket is not None and admission is not None:
            admission.release(sent.ticket)
        latency = (clock() - sent.start) * 1000
        if isinstance(outcome, TransportError):
            _report_failure(pool, admission, upstream, latency, outcome.reason, outcome.retry_after)
            attempts.append(
                Attempt(upstream.id, upstream.provider, "hard", outcome.reason, round(latency))
            )
            if outcome.reason == "timeout" and sent.timeout < budget.attempt_timeout_s:
                by_deadline = True
            return None
        status, raw = outcome
        verdict = assess(status, raw, calls, is_batch=is_batch, tip=tip)
        attempts.append(
            Attempt(upstream.id, upstream.provider, verdict.verdict, verdict.reason, round(latency))
        )
        if verdict.verdict == "hard":
            _report_failure(pool, admission, upstream, latency, verdict.reason, None)
            return None
        pool.succeeded(upstream, latency)  # a soft answer is a healthy node, behind
        if hedger is not None:
            hedger.observe(latency)
        assert verdict.answers is not None
        if verdict.verdict == "ok":
            won = True
            return ForwardResult("ok", verdict.answers, tuple(attempts), upstream, hedged, len(raw))
        if pinned and verdict.reason in PIN_MISSES:
            # the proxy's own pin, not the client's hash: no other node is
            # tried with it, the caller sends the call again unpinned
            return ForwardResult(
                "soft",
                verdict.answers,
                tuple(attempts),
                upstream,
                hedged,
                len(raw),
                pin_missed=True,
            )
        soft = (verdict.answers, upstream, len(raw))
        prefer_archive = prefer_archive or verdict.prefer_archive
        return None

    try:
        while True:
            delay: float | None = None
            if not running:
                # a hedge is an extra racer, not one of the failover attempts
                if len(tried) >= budget.max_attempts + hedged:
                    break
                sent = await launch(True)
                if sent is None:
                    break
                if (
                    hedger is not None
                    and not waited
                    and len(tried) < budget.max_attempts
                    and hedger.can_hedge()
                ):
                    delay = hedger.delay()
                if delay is None:  # nobody can race it: awaited right here
                    try:
                        outcome: Outcome = await transport.post(
                            sent.upstream.url, body, sent.timeout
                        )
                    except TransportError as e:
                        outcome = e
                    except BaseException:  # a closed session, a cancelled flow: settle, raise
                        _abandon(pool, admission, sent, clock)
                        raise
                    result = settle(sent, outcome)
                    if result is not None:
                        return result
                    if by_deadline:
                        break
                    continue
                task = asyncio.ensure_future(transport.post(sent.upstream.url, body, sent.timeout))
                running[task] = sent
            done, _ = await asyncio.wait(running, timeout=delay, return_when=FIRST_COMPLETED)
            if not done:  # the first is slow: race it on the next-best upstream, once
                waited = True
                assert hedger is not None
                if hedger.can_hedge():
                    hedge = await launch(False)
                    if hedge is not None:
                        post = transport.post(hedge.upstream.url, body, hedge.timeout)
                        running[asyncio.ensure_future(post)] = hedge
                        hedger.hedged()
                        hedged = True
                continue
            for task in done:
                sent = running.pop(task)
                try:
                    outcome = task.result()
                except TransportError as e:
                    outcome = e
                except BaseException:  # a closed session, a cancelled post: settle, raise
                    _abandon(pool, admission, sent, clock)
                    raise
                result = settle(sent, outcome)
                if result is not None:
                    return result
            if by_deadline and not running:
                break
    finally:
        # The attempt a hedge outraced finishes in the background; anything else
        # still running (the flow itself was cancelled, a pin miss) is cancelled.
        for task, sent in running.items():
            if won:
                settle_it = partial(
                    _settle_outraced, sent, pool, admission, clock, calls, is_batch, tip
                )
                finish_unheard(task, sent.timeout, settle_it)
            else:
                task.cancel()
                _abandon(pool, admission, sent, clock)

    if soft is not None:
        return ForwardResult("soft", soft[0], tuple(attempts), soft[1], hedged, soft[2])
    # every upstream tried kept silent: a gateway timeout (504), however the time
    # was split between racers and attempts
    if by_deadline or (attempts and all(a.reason == "timeout" for a in attempts)):
        return ForwardResult("deadline", None, tuple(attempts), None, hedged)
    if admission is not None and attempts and all(a.reason == "rate-limited" for a in attempts):
        # every node tried said 429 "too many requests": the nodes' capacity is
        # spent, as when their budgets are; a time to retry, not a 502. (A 503
        # is a node failing, with or without Retry-After: the contract's 502.)
        left = pool.backoff_left(set())
        return ForwardResult(
            "capacity", None, tuple(attempts), None, hedged, retry_after_s=left or 1.0
        )
    if not attempts:
        if admission is not None and admission.shed:
            return ForwardResult(
                "capacity", None, (), None, hedged, retry_after_s=admission.retry_after_s
            )
        return ForwardResult("no-upstream", None, (), None, hedged)
    return ForwardResult("failed", None, tuple(attempts), None, hedged)


def _abandon(
    pool: UpstreamPool, admission: Admission | None, sent: _Sent, clock: Callable[[], float]
) -> None:
    """The attempt ended without an outcome (cancelled): no health verdict."""
    if sent.ticket is not None and admission is not None:
        admission.release(sent.ticket)
    pool.abandoned(sent.upstream, (clock() - sent.start) * 1000)


def _report_failure(
    pool: UpstreamPool,
    admission: Admission | None,
    upstream: Upstream,
    latency_ms: float,
    reason: str,
    retry_after: float | None,
) -> None:
    """A failed attempt: "too many requests" (a 429, or a 503 with Retry-After)
    pauses the node and a 429 teaches it a rate (with budgets kept); anything
    else counts against its health."""
    if admission is not None and (reason == "rate-limited" or retry_after is not None):
        pool.throttled(upstream, latency_ms, retry_after, reason)
        if reason == "rate-limited":  # a 429 teaches a rate; a 503 only pauses the node
            admission.budgets.rate_limited(upstream.id)
    else:
        pool.failed(upstream, latency_ms)


def _settle_outraced(
    sent: _Sent,
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
        _abandon(pool, admission, sent, clock)
        return
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
    _report_failure(pool, admission, sent.upstream, latency, reason, retry_after)
