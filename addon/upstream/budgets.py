"""What each node may still be sent: its budget of calls per second and in
flight (pure state; time is passed in).

A budget is the node's own limit (``registry.endpoints[].max_rps`` and
``max_concurrency``, e.g. a provider's published quota) or, for a node without
one that answered 429, a **learned** rate: cut to 80 % of what it was sent in
the second before the 429, then grown by 2 % a second while it answers, and
dropped after ``LEARN_FORGET_S`` without a 429 (a limit lifted), so the proxy
finds the node's real limit and stops provoking 429s (AIMD, the shape TCP uses
to share a link without being told its capacity). A learned rate paces single
calls only: a failover or a batch held back by a guess would fail or starve.

The rate is a sliding window, exactly: a node with ``max_rps: 20`` is never
sent a 21st call within any second (a token bucket would allow a burst of
twice that across a refill). A batch sent to a node counts its calls, up to
the whole budget (a batch larger than the budget is sent alone, into an empty
window, rather than never). In flight counts requests (a batch is one).

With Redis, the configured budgets are kept there instead
(``addon/upstream/shared_budgets.py``), for every proxy of the deployment at
once; learned budgets stay per process (each proxy learns its own share, as
separate TCP senders do).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from common.config import Endpoint

LEARN_CUT = 0.8  # after a 429: this share of what the node was sent in the last second
LEARN_GROWTH_PER_S = 0.02  # then this much more per second without another 429
LEARN_FORGET_S = 20.0  # this long without a 429: the learned rate is dropped (a limit lifted)
LEARN_CUT_EVERY_S = 1.0
# A 429 while the node was sent fewer calls than this in the last second says
# little about a rate (a daily quota, a hiccup): the back-off answers it alone,
# instead of pacing the node at one call a second for the next 20 s.
LEARN_MIN_SEEN = 5
LEARN_CEILING = 100_000.0  # a learned rate grown past this is dropped: unlimited again
# The window is a little longer than a second: between the proxy taking budget
# and the node reading the request lie the event loop, a connection and the
# network, so two calls sent a second apart may arrive closer (tens of ms on a
# busy machine: measured at the node, 1.05 s let a 21st call in at 20/s).
WINDOW_S = 1.1
_MAX_KEPT = 100_000  # send times kept per node (bounded however high a rate)


@dataclass(frozen=True, slots=True)
class Ticket:
    """A call's place in a node's budget, given back when the call ends."""

    endpoint: str
    member: str = ""  # its entry in the shared in-flight set (Redis), if any
    heavy: bool = False  # it holds one of the node's places for heavy reads


@dataclass(slots=True)
class NodeBudget:
    max_rps: int | None = None
    max_concurrency: int | None = None
    learned_rps: float | None = None
    learned_at: float = 0.0
    sent: deque[float] = field(default_factory=lambda: deque(maxlen=_MAX_KEPT))
    inflight: int = 0
    heavy_inflight: int = 0

    def rps(self, now: float) -> float | None:
        """The rate in force: the configured one, else the learned one (grown since)."""
        if self.max_rps is not None:
            return float(self.max_rps)
        if self.learned_rps is None:
            return None
        age = max(0.0, now - self.learned_at)
        grown = self.learned_rps * (1 + LEARN_GROWTH_PER_S) ** age
        if grown > LEARN_CEILING or age > LEARN_FORGET_S:
            self.learned_rps = None
            return None
        return grown

    def recent(self, now: float) -> int:
        """Calls sent in the last second."""
        sent = self.sent
        while sent and sent[0] <= now - WINDOW_S:
            sent.popleft()
        return len(sent)

    def wait_s(self, now: float, calls: int, retry: bool = False) -> float:
        """0 when ``calls`` more fit now; else how long until they may.
        A learned rate is a guess: it paces single calls, but never holds back
        a failover (``retry``) or a batch, which would then fail or starve."""
        wait = 0.0
        rate = self.rps(now)
        if rate is not None and self.max_rps is None and (retry or calls > 1):
            rate = None
        if rate is not None:
            limit = max(1, math.floor(rate))
            used = self.recent(now)
            over = used + min(calls, limit) - limit
            if over > 0:
                # the call that must leave the window for these to fit
                wait = self.sent[over - 1] + WINDOW_S - now
        if self.max_concurrency is not None and self.inflight >= self.max_concurrency:
            wait = max(wait, CONCURRENCY_POLL_S)
        return wait

    def use(self, now: float) -> float:
        """How much of its budget is in use (0..1): the larger of the rate's
        last second and the places in flight; 0 without a budget."""
        used = 0.0
        rate = self.rps(now)
        if rate is not None:
            used = self.recent(now) / max(rate, 1.0)
        if self.max_concurrency is not None:
            used = max(used, self.inflight / self.max_concurrency)
        return min(used, 1.0)

    def take(self, now: float, calls: int, heavy: bool = False) -> None:
        self.sent.extend([now] * max(1, calls))
        self.inflight += 1
        self.heavy_inflight += heavy

    def release(self, heavy: bool = False) -> None:
        self.inflight = max(0, self.inflight - 1)
        if heavy:
            self.heavy_inflight = max(0, self.heavy_inflight - 1)

    def rate_limited(self, now: float) -> None:
        """A 429 from a node without a configured rate: learn one below what it got."""
        if self.max_rps is not None:
            return
        if self.learned_rps is not None and now - self.learned_at < LEARN_CUT_EVERY_S:
            return  # the other 429s of the same burst: one cut per burst, as TCP per RTT
        current = self.rps(now)
        seen = self.recent(now)
        if current is None and seen < LEARN_MIN_SEEN:
            return
        base = seen if current is None else min(current, seen or current)
        self.learned_rps = max(1.0, base * LEARN_CUT)
        self.learned_at = now


# When a node's in-flight budget is full, nothing says when a call will end:
# the fair wait is woken by every call's end, and polls at this pace besides.
CONCURRENCY_POLL_S = 0.02


class Budgets:
    """Every node's budget, by endpoint id (all networks)."""

    def __init__(
        self,
        endpoints: Iterable[Endpoint],
        *,
        clock: Callable[[], float],
        adaptive: bool = True,
        heavy_per_node: int = 0,
    ) -> None:
        self.clock = clock
        self.adaptive = adaptive
        # heavy reads (answers priced by their bytes) in flight per node at most
        # (0: no cap), so a node's other threads stay free for light calls
        self.heavy_per_node = heavy_per_node
        self.nodes: dict[str, NodeBudget] = {
            e.id: NodeBudget(e.max_rps, e.max_concurrency) for e in endpoints
        }

    def inherit(self, old: Budgets) -> None:
        """Learned rates and calls in flight outlive a config reload."""
        for eid, node in self.nodes.items():
            prev = old.nodes.get(eid)
            if prev is not None:
                node.learned_rps, node.learned_at = prev.learned_rps, prev.learned_at
                node.sent, node.inflight = prev.sent, prev.inflight
                node.heavy_inflight = prev.heavy_inflight

    def node(self, endpoint: str) -> NodeBudget:
        node = self.nodes.get(endpoint)
        if node is None:  # an upstream the config did not list (tests): unlimited
            node = self.nodes[endpoint] = NodeBudget()
        return node

    def configured(self, endpoint: str) -> bool:
        n = self.nodes.get(endpoint)
        return n is not None and (n.max_rps is not None or n.max_concurrency is not None)

    def use(self, endpoint: str) -> float:
        node = self.nodes.get(endpoint)
        return 0.0 if node is None else node.use(self.clock())

    def heavy_full(self, endpoint: str, heavy: bool) -> bool:
        cap = self.heavy_per_node
        return heavy and cap > 0 and self.node(endpoint).heavy_inflight >= cap

    def try_take(
        self, endpoint: str, calls: int, heavy: bool = False, retry: bool = False
    ) -> Ticket | float:
        """A ticket if ``calls`` fit in the node's budget now (they are counted),
        else the seconds until they may. ``heavy``: a read priced by its bytes;
        ``retry``: a failover attempt (a learned rate does not hold it back)."""
        now = self.clock()
        node = self.node(endpoint)
        wait = node.wait_s(now, calls, retry)
        if self.heavy_full(endpoint, heavy):
            wait = max(wait, CONCURRENCY_POLL_S)
        if wait > 0:
            return wait
        heavy = heavy and self.heavy_per_node > 0
        node.take(now, calls, heavy)
        return Ticket(endpoint, heavy=heavy)

    def release(self, ticket: Ticket) -> None:
        self.node(ticket.endpoint).release(ticket.heavy)

    def rate_limited(self, endpoint: str) -> None:
        if self.adaptive:
            self.node(endpoint).rate_limited(self.clock())

    def snapshot(self) -> dict[str, dict[str, float | int | None]]:
        """Per node with a budget: the rate in force, calls in the last second,
        in flight (the metrics and the dashboard)."""
        now = self.clock()
        out: dict[str, dict[str, float | int | None]] = {}
        for eid, node in self.nodes.items():
            rate = node.rps(now)
            if rate is None and node.max_concurrency is None:
                continue
            out[eid] = {
                "rps": None if rate is None else round(rate, 2),
                "learned": node.max_rps is None and rate is not None,
                "sent_last_s": node.recent(now),
                "max_concurrency": node.max_concurrency,
                "inflight": node.inflight,
            }
        return out
