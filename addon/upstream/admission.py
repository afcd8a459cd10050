"""One call's way past the nodes' budgets: choose a node that has budget for
it now; if none has, wait its fair turn (``fair_wait.py``) for at most
``proxy.upstream_limits.max_wait_s``, then give up with a time to retry.

One ``Admission`` per call (it remembers whether the call waited and whether
it was shed); the budgets and the fair wait are the runtime's. A hedge takes
budget only if there is some at once: it never waits (it is an optimisation,
and a scarce budget is better spent on calls no one has sent yet).

A node with a learned rate is taken first only while it keeps
``budgets.PROBE_ROOM`` calls of room under the rate; when no node has that
room, the whole rate is used, the node using the least of its budget first
(``UpstreamPool.choose(spread=True)``), so the calls left over spread evenly
rather than filling the fastest node to its limit. So while the nodes can
carry the load, none is kept at its limit: the sidecar's probes find room
there, and no rate grows into the node's next 429.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable
from typing import Protocol

from addon.upstream.budgets import PROBE_ROOM, Ticket
from addon.upstream.fair_wait import FairWait
from addon.upstream.pool import Upstream, UpstreamPool


class BudgetBook(Protocol):
    @property
    def adaptive(self) -> bool: ...

    @property
    def synchronous(self) -> bool: ...  # try_take never returns an awaitable

    def try_take(
        self,
        endpoint: str,
        calls: int,
        heavy: bool = False,
        retry: bool = False,
        room: int = 0,
        *,
        whole: bool = False,
    ) -> Ticket | float | Awaitable[Ticket | float]: ...

    def release(self, ticket: Ticket) -> None: ...

    def learns(self, endpoint: str) -> bool: ...

    def rate_limited(self, endpoint: str, untaught: Callable[[], object] | None = None) -> None: ...


class Admission:
    def __init__(
        self,
        budgets: BudgetBook,
        fair: FairWait,
        *,
        client: str,
        max_wait_s: float,
        clock: Callable[[], float],
        heavy: bool = False,
        wake: tuple[FairWait, ...] = (),
    ) -> None:
        self.budgets = budgets
        # the other lines told when this call's place frees up (a heavy read's
        # end frees budget a light call may be waiting for, and the other way)
        self.wake = wake
        self.heavy = heavy  # a read priced by its bytes: it takes a heavy-lane place
        self.fair = fair
        self.client = client
        self.max_wait_s = max_wait_s
        self.clock = clock
        self.waited = False  # the call queued for budget at least once
        self.shed = False  # it gave up: every eligible node stayed busy
        self.retry_after_s = 1.0  # when shed: when budget is expected again
        self._wait_until: float | None = None

    def take_now(
        self,
        pool: UpstreamPool,
        tried: set[str],
        calls: int,
        prefer_archive: bool = False,
        min_block: int | None = None,
        state_block: int | None = None,
        whole: bool = False,
    ) -> tuple[Upstream, Ticket] | None:
        """The common case without a coroutine (four fewer a miss): nobody
        waits for budget, and the best node has room under its learned rate
        now (the first step of ``acquire``'s first pass). None: take the whole
        way, ``acquire`` (it chooses again: nothing was taken)."""
        if self.fair.busy or not self.budgets.synchronous:
            return None
        upstream = self._choose(pool, tried, prefer_archive, min_block, state_block, False)
        if upstream is None:
            return None
        taken = self.budgets.try_take(
            upstream.id, calls, self.heavy, False, PROBE_ROOM, whole=whole
        )
        return (upstream, taken) if isinstance(taken, Ticket) else None

    async def take_whole(
        self,
        pool: UpstreamPool,
        tried: set[str],
        calls: int,
        prefer_archive: bool = False,
        min_block: int | None = None,
        state_block: int | None = None,
    ) -> tuple[Upstream, Ticket] | None:
        """An upstream batch (``batching.py``): a node with room for all of it
        now, counted whole, asked once (budgets in Redis too), never waiting
        nor passing anyone in line; None: its calls go alone, each its turn."""
        if self.fair.busy:
            return None
        args = (pool, tried, calls, prefer_archive, min_block, state_block)
        return (await self._try(*args, whole=True))[0]

    async def acquire(
        self,
        pool: UpstreamPool,
        tried: set[str],
        calls: int,
        prefer_archive: bool = False,
        min_block: int | None = None,
        state_block: int | None = None,
        *,
        until: float,
        wait: bool,
    ) -> tuple[Upstream, Ticket] | None:
        """A node with budget for ``calls`` and the ticket that holds it; None
        when no node is left (``shed`` says whether budgets were the reason)."""

        async def attempt() -> tuple[tuple[Upstream, Ticket] | None, float | None]:
            return await self._try(pool, tried, calls, prefer_archive, min_block, state_block)

        if not self.fair.busy or not wait:
            got, retry = await attempt()
            if got is not None or retry is None or not wait:
                return got
            self.retry_after_s = max(retry, 1.0)
        else:  # in line behind others, no node asked yet: if shed, when may one take it?
            # every node pausing: the first one's end; else 1 (a budget frees within a window)
            self.retry_after_s = max(1.0, pool.back_in(set(pool.upstreams)) or 1.0)
        self.waited = True
        if self._wait_until is None:  # the call's whole wait, over its attempts
            self._wait_until = self.clock() + self.max_wait_s
        stop = min(until, self._wait_until)
        again = False
        while True:
            if not await self.fair.turn(self.client, stop - self.clock(), again=again):
                self.shed = True
                return None
            got, retry = None, None
            try:
                got, retry = await attempt()
            finally:
                self.fair.report(None if got is not None or retry is None else retry)
            if got is not None:
                return got
            if retry is None:  # no node left at all: not a matter of budget
                return None
            self.retry_after_s = max(retry, 1.0)
            again = True

    async def _try(
        self,
        pool: UpstreamPool,
        tried: set[str],
        calls: int,
        prefer_archive: bool,
        min_block: int | None,
        state_block: int | None = None,
        *,
        whole: bool = False,
    ) -> tuple[tuple[Upstream, Ticket] | None, float | None]:
        """Best node first, skipping those without budget now. The second
        value: seconds until budget (or a back-off's end) may let one in;
        None when no node is left to wait for. A node that would be left
        short of ``PROBE_ROOM`` under its learned rate is taken only when no
        node has that room (then the least used first). A failover goes to a
        node with room under its learned rate if there is one, and only else
        to one past it (a learned rate never holds a failover back). A node
        that is failing (ejected) is not taken for one that is only busy: a first
        attempt waits for the busy one's budget instead, so a last healthy node
        behind its learned rate is not reached by failovers from the failing."""
        args = (pool, tried, calls, prefer_archive, min_block, state_block)
        got, _ = await self._pass(*args, retry=False, room=PROBE_ROOM, whole=whole)
        if got is not None:
            return got, None
        if tried:
            got, _ = await self._pass(*args, retry=False, room=0, whole=whole)
            if got is not None:
                return got, None
        return await self._pass(*args, retry=bool(tried), room=0, whole=whole)

    async def _pass(
        self,
        pool: UpstreamPool,
        tried: set[str],
        calls: int,
        prefer_archive: bool,
        min_block: int | None,
        state_block: int | None,
        *,
        retry: bool,
        room: int,
        whole: bool = False,
    ) -> tuple[tuple[Upstream, Ticket] | None, float | None]:
        """``_try`` over every node once; ``retry``: past learned rates;
        ``room``: leaving that many calls free under them (none: the least
        used node first)."""
        skip = set(tried)
        soonest: float | None = None
        while True:
            upstream = self._choose(pool, skip, prefer_archive, min_block, state_block, room == 0)
            busy = soonest is not None  # a node was passed over for its budget
            if upstream is not None and busy and not retry and pool.ejected(upstream):
                # a node known to fail is no stand-in for one that is only busy:
                # the call waits its turn there (then is shed with Retry-After)
                # rather than fail over from the failing one into its limit
                upstream = None
            if upstream is None:
                backoff = pool.backoff_left(skip)
                if backoff is not None:
                    soonest = backoff if soonest is None else min(soonest, backoff)
                return None, soonest
            taken = self.budgets.try_take(upstream.id, calls, self.heavy, retry, room, whole=whole)
            if inspect.isawaitable(taken):
                taken = await taken
            if isinstance(taken, Ticket):
                return (upstream, taken), None
            skip.add(upstream.id)
            soonest = taken if soonest is None else min(soonest, taken)

    def _choose(
        self,
        pool: UpstreamPool,
        skip: set[str],
        prefer_archive: bool,
        min_block: int | None,
        state_block: int | None,
        spread: bool,
    ) -> Upstream | None:
        return pool.choose(
            skip,
            prefer_archive=prefer_archive,
            min_block=min_block,
            state_block=state_block,
            light=not self.heavy,
            spread=spread,
        )

    def release(self, ticket: Ticket) -> None:
        self.budgets.release(ticket)
        self.fair.freed()
        for other in self.wake:
            other.freed()

    @property
    def retry_after(self) -> int:
        """Whole seconds for ``Retry-After``, at least 1."""
        return max(1, math.ceil(round(self.retry_after_s, 3)))  # 1.0000001 s is 1
