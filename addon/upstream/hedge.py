"""When to send a slow read to a second upstream (pure; time injected).

The delay is the recent ``quantile`` (p95 by default) of good answers'
latencies, clamped to [``min_delay_ms``, ``max_delay_ms``]: a call still
unanswered then is in the slowest 5 %, and a second upstream is likely to
answer first. Until enough answers were seen there is no delay (no hedge).

Per kind of call (``hedge_kind``: the method, a runtime API's name for
``state_call``): a read that is always slower than most of the network's calls
is not "slow", it is what it costs. With one delay for the network, a
validator fleet's ~17 cheap ``chain_getHeader`` polls a second set it at the
50 ms floor, and any read slower by nature (a runtime API call, a page of
keys) was raced on a second node whenever the budget had a token: a second
upstream call for no gain. A kind with enough answers of its own waits its
own quantile; before that, the network's delay, but never less than the
slowest answer its kind had.

The budget keeps hedges at most ``max_ratio`` of calls: every call earns
``max_ratio`` of a token (up to a small burst), a hedge spends one. So a
network where every node is slow (p95 itself is high) is not doubled: the
delay follows the latencies, and the budget caps the extra load.

The attempt a hedge outraced is left to finish (``finish_unheard``), so its
node's real latency is learned; those still running are kept here.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from addon.quota.sizes import kind as answer_kind
from addon.rpc.jsonrpc import Call
from common.config.upstream_calls import HedgeConfig

_WINDOW = 512  # recent good latencies kept
_MIN_SAMPLES = 20  # before this many, no hedging (no idea what "slow" is yet)
_RECOMPUTE_EVERY = 32  # samples between two quantile computations
_BURST = 5.0  # tokens a quiet network can save up
_MAX_KINDS = 256  # kinds with a window of their own (the least recently answered go)
_KIND_WINDOW = 64  # recent latencies kept per kind
# Past its timeout an outraced attempt is cancelled even if its transport
# overlooked it: one left pending would keep its node's in-flight age growing.
_GRACE_S = 1.0

# Outraced attempts still running: referenced so that none is collected while
# it runs, and so that they can be cancelled together (``cancel_outraced``).
_OUTRACED: set[asyncio.Task[Any]] = set()


def hedge_kind(calls: Sequence[Call], is_batch: bool) -> str:
    """What a call's latency is compared with: the kind of call whose answer
    sizes are learned (``addon/quota/sizes.py``: its method, a ``state_call``'s
    runtime API too: ``get_neurons_lite`` and ``Core_version`` differ a
    hundredfold); every batch together."""
    if is_batch or len(calls) != 1:
        return "batch"
    return answer_kind(calls[0])


class _Window:
    """A ring of recent good latencies (ms) and its clamped quantile."""

    __slots__ = ("delay_s", "next", "samples", "since", "size", "slowest")

    def __init__(self, size: int) -> None:
        self.size = size
        self.samples: list[float] = []
        self.next = 0  # ring position once the window is full
        self.since = 0
        self.delay_s: float | None = None
        self.slowest = 0.0  # ms: the slowest answer seen

    def observe(self, latency_ms: float, config: HedgeConfig) -> None:
        if latency_ms > self.slowest:
            self.slowest = latency_ms
        if len(self.samples) < self.size:
            self.samples.append(latency_ms)
        else:
            self.samples[self.next] = latency_ms
            self.next = (self.next + 1) % self.size
        self.since += 1
        if len(self.samples) >= _MIN_SAMPLES and (
            self.delay_s is None or self.since >= _RECOMPUTE_EVERY
        ):
            self.since = 0
            ordered = sorted(self.samples)
            q = ordered[min(len(ordered) - 1, int(config.quantile * len(ordered)))]
            self.delay_s = min(config.max_delay_ms, max(config.min_delay_ms, q)) / 1000


class Hedger:
    """One network's hedge delays (the network's and each kind's) and budget."""

    def __init__(self, config: HedgeConfig) -> None:
        self.config = config
        self._all = _Window(_WINDOW)
        self._kinds: OrderedDict[str, _Window] = OrderedDict()
        self._tokens = 1.0
        self.calls = 0
        self.hedges = 0

    def call(self, n: int = 1) -> None:
        """A call starts (``n``: the clients' calls an upstream batch carries,
        each earning its share, as it would alone): it earns its share of the budget."""
        self.calls += n
        self._tokens = min(_BURST, self._tokens + n * self.config.max_ratio)

    def delay(self, kind: str | None = None) -> float | None:
        """Seconds to wait for the first upstream before hedging a call of
        ``kind``; None: do not hedge."""
        if not self.config.enabled:
            return None
        own = self._kinds.get(kind) if kind is not None else None
        if own is None:
            return self._all.delay_s
        if own.delay_s is not None:
            return own.delay_s
        net = self._all.delay_s
        if net is None:
            return None
        return max(net, min(self.config.max_delay_ms, own.slowest) / 1000)

    def can_hedge(self) -> bool:
        return self.config.enabled and self._tokens >= 1.0

    def hedged(self) -> None:
        self.hedges += 1
        self._tokens -= 1.0

    def observe(self, latency_ms: float, kind: str | None = None) -> None:
        """A good answer's latency (an ok or behind-the-tip verdict)."""
        self._all.observe(latency_ms, self.config)
        if kind is None:
            return
        kinds = self._kinds
        own = kinds.get(kind)
        if own is None:
            own = kinds[kind] = _Window(_KIND_WINDOW)
            if len(kinds) > _MAX_KINDS:  # bounded: the least recently answered goes
                kinds.popitem(last=False)
        else:
            kinds.move_to_end(kind)  # a client's made-up API names cannot crowd it out
        own.observe(latency_ms, self.config)


def finish_unheard(
    task: asyncio.Task[Any], timeout: float, settle: Callable[[asyncio.Task[Any]], None]
) -> None:
    """Let an attempt a hedge outraced run to its end (``timeout``, plus a
    grace), then ``settle`` it (with the task, done or cancelled)."""
    _OUTRACED.add(task)
    guard = asyncio.get_running_loop().call_later(timeout + _GRACE_S, task.cancel)

    def done(t: asyncio.Task[Any]) -> None:
        _OUTRACED.discard(t)
        guard.cancel()
        settle(t)

    task.add_done_callback(done)


def outraced_in_flight() -> int:
    """Outraced attempts still running."""
    return len(_OUTRACED)


def cancel_outraced() -> None:
    """Cancel the outraced attempts still running (shutting down: nobody reads
    their answers); each is settled as abandoned when its cancel lands."""
    for task in list(_OUTRACED):
        task.cancel()


async def first_done[F: asyncio.Future[Any]](
    running: Iterable[F], timeout: float | None
) -> list[F]:
    """The racers done when the first of them ends or ``timeout`` passes:
    ``asyncio.wait(FIRST_COMPLETED)`` without its sets, counter and checks
    (one future, one callback per racer, one timer)."""
    tasks = list(running)
    done = [t for t in tasks if t.done()]  # an eager task may have ended at once
    if done:
        return done
    waiter = asyncio.get_running_loop().create_future()

    def wake(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    for t in tasks:
        t.add_done_callback(wake)
    timer = None if timeout is None else asyncio.get_running_loop().call_later(timeout, wake)
    try:
        await waiter
    finally:
        if timer is not None:
            timer.cancel()
        for t in tasks:
            t.remove_done_callback(wake)
    return [t for t in tasks if t.done()]
