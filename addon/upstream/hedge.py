"""When to send a slow read to a second upstream (pure; time injected).

The delay is the network's recent ``quantile`` (p95 by default) of good
answers' latencies, clamped to [``min_delay_ms``, ``max_delay_ms``]: a call
still unanswered then is in the slowest 5 %, and a second upstream is likely
to answer first. Until enough answers were seen there is no delay (no hedge).

The budget keeps hedges at most ``max_ratio`` of calls: every call earns
``max_ratio`` of a token (up to a small burst), a hedge spends one. So a
network where every node is slow (p95 itself is high) is not doubled: the
delay follows the latencies, and the budget caps the extra load.

The attempt a hedge outraced is left to finish (``finish_unheard``), so its
node's real latency is learned; those still running are kept here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

from common.config.upstream_calls import HedgeConfig

_WINDOW = 512  # recent good latencies kept
_MIN_SAMPLES = 20  # before this many, no hedging (no idea what "slow" is yet)
_RECOMPUTE_EVERY = 32  # samples between two quantile computations
_BURST = 5.0  # tokens a quiet network can save up
# Past its timeout an outraced attempt is cancelled even if its transport
# overlooked it: one left pending would keep its node's in-flight age growing.
_GRACE_S = 1.0

# Outraced attempts still running: referenced so that none is collected while
# it runs, and so that they can be cancelled together (``cancel_outraced``).
_OUTRACED: set[asyncio.Task[Any]] = set()


class Hedger:
    """One network's hedge delay and budget."""

    def __init__(self, config: HedgeConfig) -> None:
        self.config = config
        self._samples: list[float] = []
        self._next = 0  # ring position once the window is full
        self._since = 0
        self._delay_s: float | None = None
        self._tokens = 1.0
        self.calls = 0
        self.hedges = 0

    def call(self) -> None:
        """A call starts: it earns its share of the budget."""
        self.calls += 1
        self._tokens = min(_BURST, self._tokens + self.config.max_ratio)

    def delay(self) -> float | None:
        """Seconds to wait for the first upstream before hedging; None: do not hedge."""
        return self._delay_s if self.config.enabled else None

    def can_hedge(self) -> bool:
        return self.config.enabled and self._tokens >= 1.0

    def hedged(self) -> None:
        self.hedges += 1
        self._tokens -= 1.0

    def observe(self, latency_ms: float) -> None:
        """A good answer's latency (an ok or behind-the-tip verdict)."""
        if len(self._samples) < _WINDOW:
            self._samples.append(latency_ms)
        else:
            self._samples[self._next] = latency_ms
            self._next = (self._next + 1) % _WINDOW
        self._since += 1
        if len(self._samples) >= _MIN_SAMPLES and (
            self._delay_s is None or self._since >= _RECOMPUTE_EVERY
        ):
            self._since = 0
            ordered = sorted(self._samples)
            q = ordered[min(len(ordered) - 1, int(self.config.quantile * len(ordered)))]
            c = self.config
            self._delay_s = min(c.max_delay_ms, max(c.min_delay_ms, q)) / 1000


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
