"""Upstream batching: light single reads of one client that miss the cache in
the same loop turn, bound for the same nodes, go upstream as one JSON-RPC batch.

Why: a miss that goes upstream alone pays the whole way there and back (an
attempt, its admission, an HTTP exchange, the judging of the answer) for one
small answer; an SDK that reads 30 storage entries with ``asyncio.gather``
sends them at once. Sent as one batch, those costs are paid once for all of
them (scenario 15: a miss costs ~4x less of the proxy's CPU in a batch of 32
than alone), and the node parses one request instead of 30.

What is grouped (``group_key``): single calls of the methods in ``BATCHABLE``
(cheap reads of one value), of one client, routed alike (the same block
constraints, pinned by the proxy or not, the same budget) and of one kind of
latency (hedges compare the batch with that kind's). A client batch, a heavy
read, a background read or any other method goes alone, as before. Calls are
collected until the end of the loop turn they arrived in (``call_soon``: no
timer, no added wait) or ``max_calls``.

What a client sees does not change:

* an answer the nodes gave ``ok`` for the batch is each call's own;
* otherwise each call is judged alone: one whose own answer is good takes it,
  the others are sent again alone within what is left of their deadline, as
  if they had gone alone from the start (one call that fails on every node,
  say its answer is too large, never fails the calls beside it);
* a node that is gone, over capacity or silent (no answers at all) fails the
  whole batch the way it would have failed each call.

A group with one call is handed back to its caller, which sends it itself in
its own task (no task is made for it). A group of several runs in a task of
its own; a caller that goes away (its client gone) leaves the others served,
and the task is cancelled once every caller has gone.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any, NamedTuple

from addon.rpc.jsonrpc import Call, dumps
from addon.upstream.failover import judge_answer
from addon.upstream.forward import Budget, ForwardResult, ResultKind

log = logging.getLogger("chainproxy")

# cheap reads of one value: grouped, their answers alike in size and time.
# Not chain_getBlockHash: each height is its own routing (min_block), so two
# distinct heights never share a group and the method would only pay for looking.
BATCHABLE = frozenset(
    {
        "chain_getHeader",
        "chain_getFinalizedHead",
        "chain_getHead",
        "state_getStorage",
        "state_getStorageAt",
        "state_getStorageHash",
        "state_getStorageHashAt",
        "state_getStorageSize",
        "state_getStorageSizeAt",
        "state_getRuntimeVersion",
        "chain_getRuntimeVersion",
    }
)

REFUSED_OFF_S = 600  # batching off for a network whose nodes refuse batches whole
REFUSALS = 3  # ... that many in a row
# a counter's name, by how much, its labels (LiveMetrics.count_extra)
Count = Callable[..., None]
# (calls, is_batch, pinned positions, budget) -> the forward's result
Send = Callable[[Sequence[Call], bool, frozenset[int], Budget], Awaitable[ForwardResult]]


class GroupKey(NamedTuple):
    """What every call of one upstream batch shares (a tuple: made for every
    batchable miss, hashed twice)."""

    network: str
    client: str
    min_block: int | None
    prefer_archive: bool
    state_block: int | None
    pinned: bool  # the proxy pinned the call to the head (a pin miss is its own)
    budget: Budget
    kind: str  # whose latencies a hedge compares it with: the method's (none is a state_call)
    tip: int | None  # the network's best block when sent (answers are judged against it)


def batchable(call: Call, *, heavy: bool, background: bool) -> bool:
    return not heavy and not background and call.method in BATCHABLE


class _Member:
    __slots__ = ("call", "future", "send")

    def __init__(self, call: Call, send: Send, future: asyncio.Future[ForwardResult | Budget]):
        self.call, self.send, self.future = call, send, future

    def resolve(self, value: ForwardResult | Budget) -> None:
        if not self.future.done():  # its caller may have gone
            self.future.set_result(value)


class UpstreamBatcher:
    """The groups of the current loop turn; ``forward`` is a call's way through."""

    def __init__(
        self, max_calls: int, clock: Callable[[], float], count: Count | None = None
    ) -> None:
        self.max_calls = max_calls
        self.clock = clock
        self.count = count  # metrics: chainproxy_upstream_batches_total, _batched_calls_total
        self._open: dict[GroupKey, list[_Member]] = {}
        # keys that had two calls or more in the last turn: their first call of
        # this turn waits for the others too (a busy key's calls all go batched)
        self._hot: set[GroupKey] = set()
        self._warm: set[GroupKey] = set()  # this turn's, for the next
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()
        # networks whose nodes refused a batch whole: every call alone until then
        self._off: dict[str, float] = {}
        self._refusals: dict[str, int] = {}  # batches refused whole in a row, per network

    def forward(self, key: GroupKey, call: Call, send: Send) -> Awaitable[ForwardResult]:
        """The call's result. The first of its group in a loop turn goes at once,
        alone (a lone call waits for nothing), unless its group was busy in the
        last turn; those after it wait for the turn's end and go as one batch
        (or alone, if they stay one)."""
        if self._off and self._refused(key.network):
            return send((call,), False, _pinned(key, 1), key.budget)
        members = self._open.get(key)
        if members is None:
            self._open[key] = members = []  # the next ones of this turn gather here
            if not self._scheduled:
                self._scheduled = True
                asyncio.get_running_loop().call_soon(self._flush)
            if key not in self._hot:
                return send((call,), False, _pinned(key, 1), key.budget)
        member = _Member(call, send, asyncio.get_running_loop().create_future())
        members.append(member)
        if len(members) >= self.max_calls:
            self._open[key] = []
            self._warm.add(key)
            self._launch(key, members)
        return self._join(key, member)

    def _judge_refusal(self, network: str, result: ForwardResult) -> None:
        """Batches every node tried refused whole (a provider that takes no
        batches, or fewer calls in one), ``REFUSALS`` in a row with none
        answered between: its calls go alone for a while. One alone is no
        sign (a node cutting an answer short, a blip)."""
        if result.kind != "failed" or not all(_refusal(a.reason) for a in result.attempts):
            return
        n = self._refusals[network] = self._refusals.get(network, 0) + 1
        if n >= REFUSALS:
            del self._refusals[network]
            self._off[network] = self.clock() + REFUSED_OFF_S
            log.warning(
                "%s: the nodes refused %d upstream batches in a row (%s): calls go alone for %d s",
                network, n, ", ".join(a.reason for a in result.attempts), REFUSED_OFF_S,
            )  # fmt: skip

    def _refused(self, network: str) -> bool:
        until = self._off.get(network)
        if until is None:
            return False
        if self.clock() < until:
            return True
        del self._off[network]
        return False

    async def _join(self, key: GroupKey, member: _Member) -> ForwardResult:
        got = await member.future
        if isinstance(got, ForwardResult):
            return got
        return await member.send((member.call,), False, _pinned(key, 1), got)  # alone after all

    def _flush(self) -> None:
        self._scheduled = False
        groups, self._open = self._open, {}
        was_hot = self._hot
        for key, members in groups.items():
            if members:
                if len(members) > 1 or key not in was_hot:  # (a cold key's first went alone)
                    self._warm.add(key)
                self._launch(key, members)
        self._hot, self._warm = self._warm, set()

    def _launch(self, key: GroupKey, members: list[_Member]) -> None:
        if len(members) == 1:
            members[0].resolve(key.budget)  # alone: its caller sends it
            return
        if self.count is not None:
            self.count("chainproxy_upstream_batches_total", 1, network=key.network)
            self.count("chainproxy_upstream_batched_calls_total", len(members), network=key.network)
        task = asyncio.ensure_future(self._run(key, members))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        left = [len(members)]

        def gone(f: asyncio.Future[ForwardResult | Budget]) -> None:
            if f.cancelled():
                left[0] -= 1
                if left[0] == 0:
                    task.cancel()  # nobody waits for it any more

        for m in members:
            m.future.add_done_callback(gone)

    async def _run(self, key: GroupKey, members: list[_Member]) -> None:
        started = self.clock()
        calls = tuple(m.call for m in members)
        try:
            result = await members[0].send(calls, True, _pinned(key, len(calls)), key.budget)
        except asyncio.CancelledError:
            raise
        except Exception:  # a defect: each call goes alone, as without batching
            log.exception("%s: an upstream batch failed; its calls go alone", key.network)
            for m in members:
                m.resolve(key.budget)
            return
        if result.kind == "ok":
            self._refusals.pop(key.network, None)
            assert result.answers is not None
            for i, (m, answer) in enumerate(zip(members, result.answers, strict=True)):
                m.resolve(_one(result, answer, first=i == 0))
            return
        if not result.attempts:
            # nothing sent: the nodes' budgets had no room for the whole batch
            # at once (each call then waits its own fair turn), or no node
            for m in members:
                m.resolve(key.budget)
            return
        self._judge_refusal(key.network, result)
        left = key.budget.deadline_s - (self.clock() - started)
        alone = replace(key.budget, deadline_s=left) if left > 0 else None
        for i, m in enumerate(members):
            own = result.answers[i] if result.answers is not None else None
            verdict = judge_answer(m.call, own, key.tip)[0] if own is not None else "hard"
            if own is not None and verdict == "ok" and not result.pin_missed:
                m.resolve(_one(result, own, first=i == 0, kind="ok"))  # its own is good
            elif alone is not None and result.kind in ("soft", "failed"):
                m.resolve(alone)  # judged alone, on every node, as it would have been
            elif own is not None and verdict == "soft":
                m.resolve(
                    _one(result, own, first=i == 0, kind="soft", pin_missed=result.pin_missed)
                )
            else:  # the nodes' capacity, their silence, no node: as for the call alone
                m.resolve(replace(result, answers=None, corrected=()))


def _refusal(reason: str) -> bool:
    """An attempt's reason that says the node would not take the batch: an
    answer that is no batch's (an error object), or a 4xx."""
    return reason == "invalid-body" or (reason.startswith("http-4") and reason != "http-429")


def _pinned(key: GroupKey, n: int) -> frozenset[int]:
    """The positions of the calls the proxy pinned to the head: all or none."""
    return frozenset(range(n)) if key.pinned else frozenset()


def _one(
    result: ForwardResult,
    answer: dict[str, Any],
    *,
    first: bool,
    kind: ResultKind | None = None,
    pin_missed: bool = False,
) -> ForwardResult:
    """One call's share of a batch's result (nodes corrected: told once). Its
    size is its own answer's, not the batch's: the quota prices a call by its
    answer's bytes and learns its kind's size from them (the batch's body,
    given to each, once charged every call for all of them)."""
    return ForwardResult(
        kind or result.kind,
        (answer,),
        result.attempts,
        result.upstream,
        result.hedged,
        len(dumps(answer)),
        pin_missed=pin_missed,
        corrected=result.corrected if first else (),
    )
