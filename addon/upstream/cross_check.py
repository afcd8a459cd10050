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
  answer (if it was the client's) is dropped, and so is every other cache
  entry it answered (``purge``: ``addon/cache/purge.py``). All three
  different, or no third node: nobody can be blamed; the entry is dropped all
  the same.
* A quarantined node is asked again, beside later checks of its network, the
  very call it was outvoted on; once it answers that as the majority did, it
  is admitted again (a node wrong on some keys agrees on most others: an
  agreement on any other call would let it straight back in).

A ``null`` that says a node does not have the block (yet) — from
``chain_getBlockHash(n)``, ``chain_getHeader(hash)``, ``chain_getBlock(hash)``
— is no vote: a node a block behind finality is not a liar (a ``null`` storage
value is a value, and is compared).

Outcomes are counted in ``chainproxy_cross_checks_total{network, outcome}``
(``agree``, ``mismatch``, ``quarantined``, ``readmitted``, ``unresolved``,
``skipped``); quarantined nodes are reported to the sidecar, which shows an
``answer-mismatch`` incident on the dashboard.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from addon.rpc.blocks import HEADER_METHODS
from addon.rpc.jsonrpc import Call
from addon.rpc.splice import RAW_MIN_BYTES, scan_answer
from addon.upstream.admission import BudgetBook
from addon.upstream.budgets import Ticket
from addon.upstream.forward import Transport, TransportError, outbound_body
from addon.upstream.pool import Upstream, UpstreamPool
from common.jsontext import loads

log = logging.getLogger("chainproxy.cross_check")

_MAX_RUNNING = 8  # checks in flight per process: beyond, a sample is skipped
READMIT_EVERY_S = 10.0  # a quarantined node is re-asked its convicting call at most this often
_NOTHING = object()


class Counter(Protocol):
    def __call__(self, network: str, outcome: str) -> None: ...


class Forget(Protocol):
    def __call__(self, keys: Sequence[str]) -> None: ...


class Purge(Protocol):
    """Every cache entry a node (by endpoint id) answered, to be forgotten."""

    def __call__(self, endpoint: str) -> None: ...


def _no_purge(endpoint: str) -> None:
    """Nothing cached to purge."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One client answer to check: the call as sent, who answered, what."""

    network: str
    call: Call
    endpoint: str
    result: Any
    keys: tuple[str, ...]  # the cache entries holding it
    state_block: int | None = None  # the block whose state it read: only nodes that may hold it


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
        # quarantined node -> the call it was outvoted on, and the majority's answer
        self._convicted: dict[str, tuple[Call, Any]] = {}
        self._asked_at: dict[str, float] = {}  # quarantined node -> when last re-asked

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
        purge: Purge = _no_purge,
    ) -> None:
        """``forget``: the sample's entries (its answer is not kept); ``purge``:
        every entry of a node this check quarantines."""
        if len(self._tasks) >= _MAX_RUNNING:
            self.count(sample.network, "skipped")
            return
        vote = functools.partial(self._vote, sample, pool, transport, budgets, forget, purge)
        task = asyncio.ensure_future(self._check(sample, vote))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _check(self, s: Sample, vote: Callable[[], Awaitable[None]]) -> None:
        try:
            await vote()
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
        purge: Purge,
    ) -> None:
        ask: Callable[[Upstream], Any] = lambda u: self._ask(u, s.call, transport, budgets)  # noqa: E731
        first = pool.upstreams.get(s.endpoint)
        second = pool.choose({s.endpoint}, state_block=s.state_block)
        if first is None or second is None or _unknowing(s.call, s.result):
            self.count(s.network, "skipped")
            return
        b = await ask(second)
        if b is _NOTHING:
            self.count(s.network, "skipped")
            return
        if b == s.result:
            self.count(s.network, "agree")
            await self._readmit(s, pool, transport, budgets)
            return
        self.count(s.network, "mismatch")
        third = pool.choose({s.endpoint, second.id}, state_block=s.state_block)
        c = _NOTHING if third is None else await ask(third)
        if c is not _NOTHING and c == s.result:
            self._outvoted(s, pool, second, s.result, purge)
            await self._readmit(s, pool, transport, budgets)
        elif c is not _NOTHING and c == b:
            forget(s.keys)  # the client's answer came from it: not kept
            self._outvoted(s, pool, first, b, purge)
        else:
            self.count(s.network, "unresolved")
            log.warning(
                "%s: nodes disagree on %s at a finalized block and no majority: not cached",
                s.network,
                s.call.method,
            )
            forget(s.keys)

    def _outvoted(
        self, s: Sample, pool: UpstreamPool, u: Upstream, majority: Any, purge: Purge
    ) -> None:
        if pool.quarantine(u):
            self._convicted[u.id] = (s.call, majority)
            log.warning(
                "%s: upstream %s (%s) quarantined: its %s at a finalized block differs "
                "from the answer of two other nodes",
                s.network,
                u.id,
                u.provider,
                s.call.method,
            )
            self.count(s.network, "quarantined")
            purge(u.id)  # its other answers are as suspect: none stays cached

    async def _readmit(
        self, s: Sample, pool: UpstreamPool, transport: Transport, budgets: BudgetBook | None
    ) -> None:
        """Beside a check that agreed: a quarantined node of the network is asked
        again the call it was outvoted on (one node per check), and admitted
        once it answers it as the majority did."""
        for u in pool.upstreams.values():
            if not u.quarantined or u.id == s.endpoint:
                continue
            convicted = self._convicted.get(u.id)
            if convicted is None:  # quarantined before a reload: nothing to re-ask
                pool.readmit(u)
                return
            now = asyncio.get_running_loop().time()
            if now - self._asked_at.get(u.id, -READMIT_EVERY_S) < READMIT_EVERY_S:
                return  # a quarantined node is not asked at every check
            self._asked_at[u.id] = now
            call, majority = convicted
            if await self._ask(u, call, transport, budgets) == majority:
                pool.readmit(u)
                del self._convicted[u.id]
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
        # a large string result kept as the node's bytes (addon/rpc/splice.py):
        # compared with the sample's bytes, no parse (RawJson's ==)
        doc = scan_answer(raw) if len(raw) >= RAW_MIN_BYTES else None
        try:
            doc = loads(raw) if doc is None else doc
        except (ValueError, RecursionError):
            return _NOTHING
        if not isinstance(doc, dict) or "result" not in doc:
            return _NOTHING  # an error is not an answer to compare
        if _unknowing(call, doc["result"]):
            return _NOTHING  # it does not have the block: no vote
        return doc["result"]


def _unknowing(call: Call, result: Any) -> bool:
    """A ``null`` that says the node does not have the block, not what is in it."""
    if call.facts.heights is not None:  # chain_getBlockHash(n…)
        return result is None or (isinstance(result, list) and None in result)
    return result is None and call.method in HEADER_METHODS
