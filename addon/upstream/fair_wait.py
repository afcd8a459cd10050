"""Calls waiting for a node's budget, served fairly: round robin per client.

When every eligible node's budget is spent, the calls of one network queue
here, one queue per client. Whenever budget may be free again (a call ended,
or the time the budgets named has come), the next client in turn gets one try;
a client that sends ten times more than another therefore gets the same share
of scarce capacity, not ten times it. While anyone waits, a new call queues
behind them instead of taking the budget that frees up first.

Reads priced by their bytes (``heavy``) wait in a line of their own per network
(``lines_for``): a heavy read held back only by the heavy lane
(``upstream_limits.heavy_per_node``) never makes the small calls behind it
wait for that lane to free up (in one line, a light call could wait up to a
whole heavy answer behind one); the light line is not held up by heavy
waiters, and heavy reads wait their turn among themselves.

Exactly one waiter tries at a time, and reports how it went (``report``): on
success the next one tries at once; on failure the pump sleeps until budget
may be free, and that waiter keeps its place at the head of the line.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict, deque
from collections.abc import Iterable

_MIN_SLEEP_S = 0.002
_MAX_SLEEP_S = 0.1  # a budget kept elsewhere (Redis) frees up without telling us
_REPORT_WITHIN_S = 5.0


class FairWait:
    def __init__(self) -> None:
        self._queues: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()
        self._pump: asyncio.Task[None] | None = None
        self._report: asyncio.Future[float | None] | None = None
        self._freed = asyncio.Event()
        self.waiting = 0

    @property
    def busy(self) -> bool:
        """Someone waits or is trying: a new call queues behind them."""
        trying = self._report is not None and not self._report.done()
        return self.waiting > 0 or trying

    def freed(self) -> None:
        """A call to a node of this network ended: budget may be free."""
        self._freed.set()

    async def turn(self, client: str, timeout: float, *, again: bool = False) -> bool:
        """Wait for this client's turn to try (True), at most ``timeout`` seconds
        (False). ``again``: it just tried and failed: it keeps the head of the line."""
        if timeout <= 0:
            if again and client in self._queues:
                # out of time after a failed try: the client's next call keeps
                # the turn (else a client whose oldest calls are expiring would
                # lose every other turn to them)
                self._queues.move_to_end(client, last=False)
            return False
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue = self._queues.get(client)
        if queue is None:
            queue = self._queues[client] = deque()
        if again:
            queue.appendleft(fut)
            self._queues.move_to_end(client, last=False)
        else:
            queue.append(fut)
        self.waiting += 1
        if self._pump is None or self._pump.done():
            self._pump = asyncio.get_running_loop().create_task(self._run())
        try:
            await asyncio.wait_for(asyncio.shield(fut), timeout)
            return True
        except TimeoutError:
            self._abandon(fut)
            return False
        except asyncio.CancelledError:
            self._abandon(fut)
            raise
        finally:
            self.waiting -= 1

    def _abandon(self, fut: asyncio.Future[None]) -> None:
        if fut.done():  # given the turn just as it gave up: pass it on
            self.report(None)
        else:
            fut.cancel()

    def report(self, retry_in: float | None) -> None:
        """The waiter whose turn it was is done: None when it got budget (the
        next one tries at once), else when budget may be free again."""
        if self._report is not None and not self._report.done():
            self._report.set_result(retry_in)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while self._queues:
            client, queue = next(iter(self._queues.items()))
            fut = queue.popleft()
            if fut.done():  # gave up waiting: the client's next call, same turn
                if not queue:
                    del self._queues[client]
                continue
            if queue:
                self._queues.move_to_end(client)  # the next client's turn next
            else:
                del self._queues[client]
            self._report = loop.create_future()
            self._freed.clear()
            fut.set_result(None)
            try:  # a waiter always reports; bounded all the same
                retry_in = await asyncio.wait_for(self._report, _REPORT_WITHIN_S)
            except TimeoutError:
                retry_in = None
            if retry_in is not None:
                sleep = min(max(retry_in, _MIN_SLEEP_S), _MAX_SLEEP_S)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._freed.wait(), sleep)
        self._report = None


HEAVY_LINE = "/heavy"  # the key suffix of a network's line for heavy reads


def lines_for(networks: Iterable[str]) -> dict[str, FairWait]:
    """Each network's two lines: ``net`` (every call not priced by its bytes)
    and ``net + HEAVY_LINE``."""
    return {key: FairWait() for net in networks for key in (net, net + HEAVY_LINE)}
