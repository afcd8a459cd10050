"""Forwarding with failover: up to N attempts on distinct upstreams, each with
its own timeout, all within one overall deadline. The caller sees one answer.

An attempt no hedge can race (hedging off, no delay learned yet, no hedge
left, no other node: a pool of one) is awaited in the caller's task: no task,
no wait (two loop turns, ~9 µs of a miss). One a hedge may race is a task.

When a hedge wins, the slower attempt is not cancelled: it finishes in the
background (bounded by its timeout, its answer discarded, its budget ticket
released at its end) and the pool learns its real latency and outcome.
Cancelled, it taught the pool only the hedge delay (>= 50 ms): a node at
300 ms kept being chosen. A cancelled flow still cancels all of its attempts.

One call's attempts are a ``Forward`` (``forward`` makes one and returns its
run): the attempts so far, the best soft answer, the racers still running.

A call that reads the state at a known block (``state_block``) goes only to
nodes whose horizon does not exclude it; a node that answers "State already
discarded" for it (or an unknown block, well below its best) has its horizon
corrected at once (``horizons.correct``) and the call goes on to another.
An upstream batch (``split``) ends at its first answer: its items are judged
apart by ``batching.py``. The transport is a Protocol (``transport.py``).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from addon.chain.horizons import correct
from addon.rpc.attempt import Attempt
from addon.rpc.blocks import BlockIndex
from addon.rpc.jsonrpc import Call
from addon.rpc.jsonrpc import outbound_body as outbound_body  # (cross_check.py's too)
from addon.rpc.splice import BREATHE_BYTES
from addon.upstream.admission import Admission
from addon.upstream.budgets import Ticket
from addon.upstream.failover import CAPACITY, assess, error_limit, missed_pin
from addon.upstream.hedge import Hedger, first_done, hedge_kind
from addon.upstream.pool import Upstream, UpstreamPool
from addon.upstream.settle import (
    Sent,
    abandon,
    correct_items,
    leave_running,
    pin_holder,
    report_failure,
)

# the transport's names, re-exported: callers import them from here
from addon.upstream.transport import AiohttpTransport as AiohttpTransport
from addon.upstream.transport import Transport, TransportError
from addon.upstream.transport import new_session as new_session

# 429 or a node's limit in a JSON-RPC error; 503 (a pause if Retry-After)
TOO_MANY = CAPACITY | {"http-503"}

Outcome = tuple[int, bytes] | TransportError


ResultKind = Literal["ok", "soft", "failed", "deadline", "no-upstream", "capacity"]


@dataclass(frozen=True, slots=True)
class ForwardResult:
    kind: ResultKind
    # one per call, in order (ok / soft; "capacity": a batch's answers from the
    # last node that refused some of its items for its limits, those included)
    answers: tuple[dict[str, Any], ...] | None
    attempts: tuple[Attempt, ...]
    upstream: Upstream | None  # whose answer it is
    hedged: bool = False  # a second upstream raced a slow first one
    body_bytes: int = 0  # the size of the answer's body as the upstream sent it
    retry_after_s: float = 0.0  # "capacity": when a node's budget is expected to free up
    pin_missed: bool = False  # a node did not know the block the proxy pinned the call to
    corrected: tuple[str, ...] = ()  # nodes whose horizon this call corrected (their ids)

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


def forward(
    calls: Sequence[Call],
    *,
    is_batch: bool,
    pool: UpstreamPool,
    transport: Transport,
    budget: Budget,
    clock: Callable[[], float],
    **options: Any,
) -> Coroutine[Any, Any, ForwardResult]:
    """Attempts one after the other (failover); with a ``hedger``, one not
    answered within its delay is raced on the next-best upstream, the first
    good answer wins. With an ``admission``, each attempt takes a place in its
    node's budget (its fair turn if every node's is spent); a node that says
    "too many requests" pauses. ``options``: ``Forward``'s keywords."""
    return Forward(calls, is_batch, pool, transport, budget, clock, **options).run()


class Forward:
    """One call's way upstream: its attempts so far and what they answered."""

    __slots__ = (
        "admission", "attempts", "blocks", "body", "budget", "by_deadline", "calls", "clock",
        "corrected", "deadline", "heavy", "hedged", "hedger", "is_batch", "kind", "limited",
        "min_block", "pin_missed", "pinned", "pool", "prefer_archive", "running", "soft",
        "split", "state_block", "tip", "transport", "tried", "waited", "won",
    )  # fmt: skip

    def __init__(
        self,
        calls: Sequence[Call],
        is_batch: bool,
        pool: UpstreamPool,
        transport: Transport,
        budget: Budget,
        clock: Callable[[], float],
        *,
        tip: int | None = None,
        min_block: int | None = None,
        prefer_archive: bool = False,
        hedger: Hedger | None = None,
        admission: Admission | None = None,
        pinned: frozenset[int] = frozenset(),  # the calls the proxy pinned (positions)
        state_block: int | None = None,
        heavy: bool = False,
        hedge_as: str = "",  # the latencies a hedge compares it with ("": its own kind)
        blocks: BlockIndex | None = None,  # heights of hashes: a batch's items' own state blocks
        split: bool = False,  # an upstream batch: an answer with bad items ends it (batching.py)
    ) -> None:
        self.calls, self.is_batch, self.pool, self.transport = calls, is_batch, pool, transport
        self.budget, self.clock, self.tip, self.min_block = budget, clock, tip, min_block
        self.prefer_archive, self.hedger, self.admission = prefer_archive, hedger, admission
        self.pinned, self.state_block, self.blocks = pinned, state_block, blocks
        self.split = split
        self.corrected: list[str] = []
        self.heavy = heavy  # priced by its bytes: light calls go elsewhere meanwhile
        self.body = outbound_body(calls, is_batch)
        self.deadline = 0.0
        self.tried: set[str] = set()
        self.attempts: list[Attempt] = []
        self.soft: tuple[tuple[dict[str, Any], ...], Upstream, int] | None = None
        self.pin_missed = False  # a node did not know the block the proxy pinned to
        # a batch a node answered but for items it refused for its limits
        self.limited: tuple[tuple[dict[str, Any], ...], Upstream, int] | None = None
        self.by_deadline = False
        self.hedged = False  # a second upstream was sent the call
        self.waited = False  # the hedge delay passed once (one hedge per call at most)
        self.won = False  # an attempt answered "ok": a racer still running was outraced
        self.kind = hedge_as  # what its latency is compared with (set when it may be hedged)
        self.running: dict[asyncio.Task[tuple[int, bytes]], Sent] = {}  # a hedge may race

    async def run(self) -> ForwardResult:
        self.deadline = self.clock() + self.budget.deadline_s
        hedger, running = self.hedger, self.running
        if hedger is not None:
            hedger.call(len(self.calls) if self.split else 1)  # an upstream batch: per call
            # its own latencies (an upstream batch of one kind of read: that kind's)
            self.kind = self.kind or hedge_kind(self.calls, self.is_batch)
        try:
            while True:
                delay: float | None = None
                if not running:
                    # a hedge is an extra racer, not one of the failover attempts
                    if len(self.tried) >= self.budget.max_attempts + self.hedged:
                        break
                    sent = await self._launch(True)
                    if sent is None:
                        break
                    if (
                        hedger is not None
                        and not self.waited
                        and len(self.tried) < self.budget.max_attempts
                        and len(self.pool.upstreams) > len(self.tried)  # one to race it
                        and hedger.can_hedge()
                    ):
                        delay = hedger.delay(self.kind)
                    if delay is None:  # nobody can race it: awaited right here
                        result = self._settle(sent, await self._outcome(self._post(sent), sent))
                        if result is not None:
                            return result
                        if self.by_deadline:
                            break
                        continue
                    running[asyncio.ensure_future(self._post(sent))] = sent
                done = await first_done(running, delay)
                if not done:  # the first is slow: race it on the next-best upstream, once
                    await self._hedge()
                    continue
                for task in done:
                    sent = running.pop(task)
                    result = self._settle(sent, await self._outcome(task, sent))
                    if result is not None:
                        return result
                if self.by_deadline and not running:
                    break
        finally:
            # an attempt a hedge outraced finishes in the background; anything
            # else still running (the flow cancelled, a pin miss) is cancelled
            leave_running(
                self.running, self.won, self.pool, self.admission, self.clock,
                self.calls, self.is_batch, self.tip,
            )  # fmt: skip
        return self._failure()

    def _post(self, sent: Sent) -> Awaitable[tuple[int, bytes]]:
        return self.transport.post(sent.upstream.url, self.body, sent.timeout)

    async def _outcome(self, post: Awaitable[tuple[int, bytes]], sent: Sent) -> Outcome:
        """What an attempt came to: its answer or its transport error. Anything
        else (a closed session, a cancelled flow) leaves it without a verdict."""
        try:
            got = await post
            if len(got[1]) >= BREATHE_BYTES:
                # a big answer is judged in the next loop turn: the calls that
                # arrived while it was read go first (one hold, not two in a row)
                await asyncio.sleep(0)
            return got
        except TransportError as e:
            return e
        except BaseException:
            abandon(self.pool, self.admission, sent, self.clock)
            raise

    async def _launch(self, wait: bool) -> Sent | None:
        """Choose the next upstream and take its place; ``wait``: for a node's
        budget, if need be (a hedge does not). The caller sends the call."""
        clock, admission, pool = self.clock, self.admission, self.pool
        if self.deadline - clock() <= 0:
            self.by_deadline = True
            return None
        ticket: Ticket | None = None
        if admission is None:
            upstream = pool.choose(
                self.tried,
                prefer_archive=self.prefer_archive,
                min_block=self.min_block,
                state_block=self.state_block,
                light=not self.heavy,
            )
        else:
            where = (self.prefer_archive, self.min_block, self.state_block)
            got = admission.take_now(pool, self.tried, len(self.calls), *where, self.split)
            if got is None and self.split and not self.tried:  # (asked once: Redis, others)
                got = await admission.take_whole(pool, self.tried, len(self.calls), *where)
                if got is None:
                    return None  # no room for a whole upstream batch: its calls wait alone
            if got is None:
                got = await admission.acquire(
                    pool, self.tried, len(self.calls), *where, until=self.deadline, wait=wait
                )
            upstream, ticket = got if got is not None else (None, None)
        if upstream is None:
            return None
        remaining = self.deadline - clock()
        if remaining <= 0:  # the wait for budget took the rest of the deadline
            if ticket is not None and admission is not None:
                admission.release(ticket)
            self.by_deadline = True
            return None
        self.tried.add(upstream.id)
        pool.started(upstream, self.heavy)
        timeout = min(self.budget.attempt_timeout_s, remaining)
        return Sent(upstream, clock(), timeout, ticket, self.heavy)

    async def _hedge(self) -> None:
        """The delay passed with no answer: the next-best upstream races it."""
        self.waited = True
        hedger = self.hedger
        assert hedger is not None
        if hedger.can_hedge():
            hedge = await self._launch(False)
            if hedge is not None:
                self.running[asyncio.ensure_future(self._post(hedge))] = hedge
                hedger.hedged()
                self.hedged = True

    def _settle(self, sent: Sent, outcome: Outcome) -> ForwardResult | None:
        """One attempt's outcome reported; the result to return, or None: go on."""
        pool, admission, upstream = self.pool, self.admission, sent.upstream
        if sent.heavy:
            pool.heavy_ended(upstream)
        if sent.ticket is not None and admission is not None:
            admission.release(sent.ticket)
        latency = (self.clock() - sent.start) * 1000
        if isinstance(outcome, TransportError):
            report_failure(pool, admission, upstream, latency, outcome.reason, outcome.retry_after)
            self.attempts.append(
                Attempt(upstream.id, upstream.provider, "hard", outcome.reason, round(latency))
            )
            if outcome.reason == "timeout" and sent.timeout < self.budget.attempt_timeout_s:
                self.by_deadline = True
            return None
        status, raw = outcome
        verdict = assess(status, raw, self.calls, is_batch=self.is_batch, tip=self.tip)
        self.attempts.append(
            Attempt(upstream.id, upstream.provider, verdict.verdict, verdict.reason, round(latency))
        )
        split = self.split and verdict.answers is not None and verdict.reason not in CAPACITY
        if verdict.verdict == "hard" and not split:
            report_failure(pool, admission, upstream, latency, verdict.reason, None)
            if verdict.answers is not None and verdict.reason in CAPACITY:  # items refused
                self.limited = (verdict.answers, upstream, len(raw))
            return None
        pool.succeeded(upstream, latency)  # a soft answer is a healthy node, behind
        if self.hedger is not None:
            self.hedger.observe(latency, self.kind)
        assert verdict.answers is not None
        attempts = tuple(self.attempts)
        if verdict.verdict == "ok":
            self.won = True
            return ForwardResult(
                "ok", verdict.answers, attempts, upstream, self.hedged, len(raw),
                corrected=tuple(self.corrected),
            )  # fmt: skip
        if self.pinned and missed_pin(self.calls, verdict.answers, self.pinned, self.tip):
            # the proxy's own pin: one other node known at its height is tried
            # with it (not an answer older than the head shown, from a node
            # chosen on a stale view of its best); else the caller unpins
            if self.pin_missed or not pin_holder(self.pool, self.tried, self.min_block):
                return ForwardResult(
                    "soft", verdict.answers, attempts, upstream, self.hedged, len(raw),
                    pin_missed=True,
                )  # fmt: skip
            self.pin_missed = True
            self.soft = (verdict.answers, upstream, len(raw))
            return None
        self._correct(upstream, verdict.reason, verdict.answers)
        if split:  # an upstream batch answered: its items judged apart, the bad ones alone
            return ForwardResult(
                "soft", verdict.answers, attempts, upstream, self.hedged, len(raw),
                corrected=tuple(self.corrected),
            )  # fmt: skip
        self.soft = (verdict.answers, upstream, len(raw))
        self.prefer_archive = self.prefer_archive or verdict.prefer_archive
        return None

    def _correct(self, upstream: Upstream, reason: str, answers: Sequence[dict[str, Any]]) -> None:
        """A node said it has no state at the block a call reads: corrected now,
        so no attempt goes there again. A batch's reason is its first soft
        item's, and its ``state_block`` its oldest item's: each item is judged
        with its own block (``correct_items``)."""
        if len(self.calls) == 1:
            if self.state_block is not None and correct(upstream, self.state_block, reason):
                self.corrected.append(upstream.id)
        elif self.blocks is not None:
            if correct_items(upstream, self.calls, answers, self.tip, self.blocks):
                self.corrected.append(upstream.id)

    def _failure(self) -> ForwardResult:
        """No good answer: the best soft one, or why there was none."""
        attempts, hedged, admission = tuple(self.attempts), self.hedged, self.admission
        if self.soft is not None:
            return ForwardResult(
                "soft", self.soft[0], attempts, self.soft[1], hedged, self.soft[2],
                pin_missed=self.pin_missed, corrected=tuple(self.corrected),
            )  # fmt: skip
        # every upstream tried kept silent: a gateway timeout (504), however the time
        # was split between racers and attempts
        if self.by_deadline or (attempts and all(a.reason == "timeout" for a in attempts)):
            return ForwardResult("deadline", None, attempts, None, hedged)
        if admission is not None and attempts and all(a.reason in CAPACITY for a in attempts):
            # every node tried said 429 "too many requests" (or its limit in a
            # JSON-RPC error): the nodes' capacity is spent, as when their budgets
            # are; a time to retry, not a 502. (A 503 is a node failing, with or
            # without Retry-After: the contract's 502.) A batch keeps the items
            # the last of them answered: only those it refused are refused.
            left = self.pool.back_in({a.endpoint for a in attempts})
            answers, upstream, size = self.limited or (None, None, 0)
            if answers is not None and all(error_limit(a) for a in answers):
                answers, upstream, size = None, None, 0  # nothing answered: refused whole
            return ForwardResult(
                "capacity", answers, attempts, upstream, hedged, size, retry_after_s=left or 1.0
            )
        if not attempts:
            if admission is not None and admission.shed:
                return ForwardResult(
                    "capacity", None, (), None, hedged, retry_after_s=admission.retry_after_s
                )
            return ForwardResult("no-upstream", None, (), None, hedged)
        return ForwardResult("failed", None, attempts, None, hedged)
