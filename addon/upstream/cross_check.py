"""Cross-checked nodes: a share of finalized, block-pinned answers is asked of
a second node too; on a mismatch a third decides, and a node outvoted is
quarantined (no client traffic) until it agrees again.

A gateway over third-party nodes trusts whatever they answer. An answer at a
finalized block by hash has exactly one right value, so any two honest nodes
agree on it byte for byte (as parsed JSON). ``proxy.cross_check.sample_rate``
(1 %) of those answers are checked, after the client got its answer: never on
the client's path, and only with budget to spare (a check takes a node's
budget without waiting, or is skipped).

* Agreement: nothing happens.
* Mismatch: a third node is asked. Two against one: the one is quarantined
  (``UpstreamPool.quarantine``: no client calls; probes go on), its cached
  answer (if it was the client's) is dropped. All three different, or no
  third node: nobody can be blamed; the entry is dropped all the same.
* A quarantined node is asked again beside later checks of its network; once
  it agrees with a verified answer it is admitted again.

Outcomes are counted in ``chainproxy_cross_checks_total{network, outcome}``
(``agree``, ``mismatch``, ``quarantined``, ``readmitted``, ``unresolved``,
``skipped``); quarantined nodes are reported to the sidecar, which shows an
``answer-mismatch`` incident on the dashboard.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from addon.pipeline.jsonrpc import Call
from addon.upstream.admission import BudgetBook
from addon.upstream.budgets import Ticket
from addon.upstream.forward import Transport, TransportError, outbound_body
from addon.upstream.pool import Upstream, UpstreamPool
from common.jsontext import loads

log = logging.getLogger("chainproxy.cross_check")

_MAX_RUNNING = 8  # checks in flight per process: beyond, a sample is skipped
_NOTHING = object()


class Counter(Protocol):
    def __call__(self, network: str, outcome: str) -> None: ...


class Forget(Protocol):
    def __call__(self, keys: Sequence[str]) -> None: ...


@dataclass(frozen=True, slots=True)
class Sample:
    """One client answer to check: the call as sent, who answered, what."""

    network: str
    call: Call
    endpoint: str
    result: Any
    keys: tuple[str, ...]  # the cache entries holding it


class CrossChecker:
    def __init__(
        self,
        sample_rate: float,
        *,
        count: Counter,
        timeout_s: float,
        rng: random.Random | None = None,
    ) -> None:
        self.sample_rate = sample_rate
        self.count = count
        self.timeout_s = timeout_s
        self._rng = rng or random.Random()
        self._tasks: set[asyncio.Task[None]] = set()

    def wanted(self) -> bool:
        """Whether to check this answer (the sampling coin), cheap enough for every call."""
        return self.sample_rate > 0 and self._rng.random() < self.sample_rate

    def submit(
        self,
        sample: Sample,
        pool: UpstreamPool,
        transport: Transport,
        budgets: BudgetBook | None,
        forget: Forget,
    ) -> None:
        if len(self._tasks) >= _MAX_RUNNING:
            self.count(sample.network, "skipped")
            return
        task = asyncio.ensure_future(self._check(sample, pool, transport, budgets, forget))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _check(
        self,
        s: Sample,
        pool: UpstreamPool,
        transport: Transport,
        budgets: BudgetBook | None,
        forget: Forget,
    ) -> None:
        try:
            await self._vote(s, pool, transport, budgets, forget)
        except asyncio.CancelledError:
            raise
        except Exception:  # a check is never the clients' problem
            log.exception("%s: cross-check of %s failed", s.network, s.call.method)

    async def _vote(
        self,
        s: Sample,
        pool: UpstreamPool,
        transport: Transport,
        budgets: BudgetBook | None,
        forget: Forget,
    ) -> None:
        ask: Callable[[Upstream], Any] = lambda u: self._ask(u, s.call, transport, budgets)  # noqa: E731
        first = pool.upstreams.get(s.endpoint)
        second = pool.choose({s.endpoint})
        if first is None or second is None:
            self.count(s.network, "skipped")
            return
        b = await ask(second)
        if b is _NOTHING:
            self.count(s.network, "skipped")
            return
        if b == s.result:
            self.count(s.network, "agree")
            await self._readmit(s, pool, ask)
            return
        self.count(s.network, "mismatch")
        third = pool.choose({s.endpoint, second.id})
        c = _NOTHING if third is None else await ask(third)
        if c is not _NOTHING and c == s.result:
            self._outvoted(s, pool, second, "the answer of two other nodes")
            await self._readmit(s, pool, ask)
        elif c is not _NOTHING and c == b:
            self._outvoted(s, pool, first, "the answer of two other nodes")
            forget(s.keys)  # the client's answer came from it: not kept
        else:
            self.count(s.network, "unresolved")
            log.warning(
                "%s: nodes disagree on %s at a finalized block and no majority: not cached",
                s.network,
                s.call.method,
            )
            forget(s.keys)

    def _outvoted(self, s: Sample, pool: UpstreamPool, u: Upstream, why: str) -> None:
        if pool.quarantine(u):
            log.warning(
                "%s: upstream %s (%s) quarantined: its %s at a finalized block differs from %s",
                s.network,
                u.id,
                u.provider,
                s.call.method,
                why,
            )
            self.count(s.network, "quarantined")

    async def _readmit(self, s: Sample, pool: UpstreamPool, ask: Callable[[Upstream], Any]) -> None:
        """A verified answer: a quarantined node of the network that agrees with
        it is admitted again (one per check)."""
        for u in pool.upstreams.values():
            if u.quarantined and u.id != s.endpoint:
                if await ask(u) == s.result:
                    pool.readmit(u)
                    log.warning("%s: upstream %s agrees again: admitted", s.network, u.id)
                    self.count(s.network, "readmitted")
                return

    async def _ask(
        self, u: Upstream, call: Call, transport: Transport, budgets: BudgetBook | None
    ) -> Any:
        """The node's result for ``call``, or ``_NOTHING`` (no budget, failed, an error)."""
        ticket: Ticket | None = None
        if budgets is not None:
            taken = budgets.try_take(u.id, 1)
            if not isinstance(taken, Ticket | float):
                taken = await taken
            if not isinstance(taken, Ticket):
                return _NOTHING  # a node without budget to spare: skip, never wait
            ticket = taken
        try:
            status, raw = await transport.post(u.url, outbound_body([call], False), self.timeout_s)
        except TransportError:
            return _NOTHING
        finally:
            if ticket is not None and budgets is not None:
                budgets.release(ticket)
        if status != 200:
            return _NOTHING
        try:
            doc = loads(raw)
        except (ValueError, RecursionError):
            return _NOTHING
        if not isinstance(doc, dict) or "result" not in doc:
            return _NOTHING  # an error is not an answer to compare
        return doc["result"]
