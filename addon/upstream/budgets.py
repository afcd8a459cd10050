"""What each node may still be sent: its budget of calls per second and in
flight (pure state; time is passed in).

A budget is the node's own limit (``registry.endpoints[].max_rps`` and
``max_concurrency``, e.g. a provider's published quota) or, for a node without
one that answered 429, a **learned** rate (``addon/upstream/learning/learned.py``: cut
to 90 % of what the node was sent in its window when the 429 came, grown
slowly while the node is full, so it settles near the real limit). A learned
rate paces single calls only: a failover or a batch held back by a guess
would fail or starve.

The rate is a sliding window **as the node counts it**: a node with
``max_rps: 20`` never receives a 21st call within any second (a token bucket
would allow a burst of twice that across a refill). The node counts a call
when it reads it, at a time the proxy does not know: between the proxy taking
budget and the node reading the request lie the event loop, a connection, the
network and the node's own loop, tens to hundreds of ms on a busy machine (a
margin on the window does not bound that). What the proxy does know is that
the node read the call before it answered. So a call counts in the window
from the moment it takes budget (in flight, it may arrive at any moment) until
``WINDOW_S`` after its attempt ended (the answer read, or the attempt given
up): the next call that takes its place is sent at least a second after the
node read it, however long either took on the way. The price: a node answering
in ``L`` seconds is sent at most ``max_rps`` calls every ``1 + L`` seconds.

A batch sent to a node counts its calls, up to the whole budget (a batch
larger than the budget is sent alone, into an empty window, rather than
never). In flight counts requests (a batch is one).

A configured budget covers every call the proxy sends the node: clients'
calls and their failover attempts, hedges (an outraced one until it ends),
pre-warm reads and cross-checks. The sidecar's probes go to the same URL from
another process, on their own schedule: they are not counted here, so a
configured budget leaves them room (``PROBE_CALLS``, ``PROBE_REQUESTS``).

With Redis, budgets and learned rates are kept there instead
(``addon/upstream/shared_budgets.py``), for every proxy of the deployment at
once: one proxy's 429 teaches them all, and the window a rate is learnt from
and paces is the node's, not one process's share of it. This book is then
each process's view, and its fallback while Redis is down.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from addon.upstream.learning import learned
from addon.upstream.learning.learned import Learned
from common.config import Endpoint

# How long after its attempt ended a call still counts: the node's window. The
# node read the call before it answered, and reads the next one after it was
# sent, so a second between the end of one and the sending of another is more
# than a second between their arrivals at the node, whatever the delays.
WINDOW_S = 1.0
_MAX_KEPT = 100_000  # end times kept per node (bounded however high a rate)
# The sidecar's probes of a node (``sidecar/probing/probes/node.py``): a full
# probe is at most 7 calls (a batch of 5, then one of 2) and its state checks
# 4 more (``sidecar/probing/probes/state.py``: two batches of 2, in the same
# slot right after it), a head probe 4 (3, then 1), each one request at a
# time, and the two may run in the same second.
# With ``leave_for_probes`` (the runtime's books), the proxy sends a node at most
# ``max_rps - PROBE_CALLS`` calls a second and ``max_concurrency -
# PROBE_REQUESTS`` requests at once (at least 1 of each), so the node gets no
# more than its budget with the probes. A learned rate is the node's whole
# limit (it was learned from what the node refused): the probes' room under it
# is ``PROBE_ROOM``, kept while the load allows.
PROBE_CALLS = 15  # a full probe (7), its state checks (4), a head probe (4)
PROBE_REQUESTS = 2
# A call goes first to a node that still has this many calls of room under its
# learned rate (``try_take(room=...)``: a head probe's calls), and past that
# room only when no node has it (``admission.py``): while the nodes' capacity
# covers the load, the sidecar's next probe finds room at a node the proxy
# keeps busy (else the node refuses it: 429s the proxy never sees), and no
# node is full, so no learned rate probes upward into a 429 either.
PROBE_ROOM = 4


def proxy_share(limit: int | None, probes: int) -> int | None:
    """What is left of a node's ``limit`` once ``probes`` are set aside (at least 1)."""
    return None if limit is None else max(1, limit - probes)


@dataclass(frozen=True, slots=True)
class Ticket:
    """A call's place in a node's budget, given back when the call ends."""

    endpoint: str
    member: str = ""  # its entry in the shared window and in-flight set (Redis), if any
    heavy: bool = False  # it holds one of the node's places for heavy reads
    calls: int = 1  # the calls it counts in the node's window (a batch's)


@dataclass(slots=True)
class NodeBudget:
    max_rps: int | None = None
    max_concurrency: int | None = None
    learned: Learned | None = None
    ended: deque[float] = field(default_factory=lambda: deque(maxlen=_MAX_KEPT))
    open_calls: int = 0  # calls taken whose attempt has not ended: in the window
    inflight: int = 0
    heavy_inflight: int = 0

    def rps(self, now: float) -> float | None:
        """The rate in force: the configured one, else the learned one."""
        if self.max_rps is not None:
            return float(self.max_rps)
        self.learned = learned.alive(self.learned, now)
        return None if self.learned is None else self.learned.rate

    @property
    def learned_rps(self) -> float | None:
        return None if self.learned is None else self.learned.rate

    def recent(self, now: float) -> int:
        """Calls in the window: in flight, or ended within ``WINDOW_S``."""
        ended = self.ended
        while ended and ended[0] <= now - WINDOW_S:
            ended.popleft()
        return self.open_calls + len(ended)

    def wait_s(
        self,
        now: float,
        calls: int,
        retry: bool = False,
        room: int = 0,
        share: int = 1,
        whole: bool = False,
    ) -> float:
        """0 when ``calls`` more fit now; else how long until they may.
        A learned rate is a guess: it paces single calls, but never holds back
        a failover (``retry``) or a batch, which would then fail or starve.
        ``room``: a paced call fits only with this many calls of the learned
        rate still free after it (a node short of that room is not full: its
        rate does not grow for it). ``share``: the processes a configured
        budget is split between (while Redis, which keeps it whole, is away).
        ``whole``: an upstream batch of single calls (``batching.py``), paced
        and counted whole: it can go call by call instead, so it never starves."""
        wait = 0.0
        rate = self.rps(now)
        if share > 1 and self.max_rps is not None:
            rate = self.max_rps / share
        paced = self.max_rps is None and rate is not None
        if paced and (retry or (calls > 1 and not whole)):
            rate = None
        if rate is not None:
            limit = max(1, math.floor(rate))
            used = self.recent(now)
            over = used + (calls if whole else min(calls, limit)) - limit
            if over > 0:
                wait = self._until(now, over)
            elif paced and room > 0 and over + room > 0:
                wait = self._until(now, over + room)
            if over > 0 and paced and self.learned is not None:  # full: probe upward
                self.learned = learned.grow(self.learned, now)
        places = self.max_concurrency
        if places is not None and self.inflight >= max(1, places // share):
            wait = max(wait, CONCURRENCY_POLL_S)
        return wait

    def _until(self, now: float, over: int) -> float:
        """How long until ``over`` calls have left the window: the ended ones
        first, oldest first; one still in flight leaves a window after it
        ends, a window from now at the soonest."""
        ended = self.ended
        return ended[over - 1] + WINDOW_S - now if over <= len(ended) else WINDOW_S

    def use(self, now: float) -> float:
        """How much of its budget is in use (0..1): the larger of the rate's
        window and the places in flight; 0 without a budget."""
        used = 0.0
        rate = self.rps(now)
        if rate is not None:
            used = self.recent(now) / max(rate, 1.0)
        if self.max_concurrency is not None:
            used = max(used, self.inflight / self.max_concurrency)
        return min(used, 1.0)

    def take(self, now: float, calls: int, heavy: bool = False) -> None:
        """``calls`` (a request) sent: in the window until they end."""
        self.open_calls += max(1, calls)
        self.inflight += 1
        self.heavy_inflight += heavy

    def release(self, now: float, calls: int = 1, heavy: bool = False) -> None:
        """The request of ``calls`` ended at ``now``: they count a window more."""
        calls = max(1, calls)
        self.open_calls = max(0, self.open_calls - calls)
        self.ended.extend([now] * calls)
        self.inflight = max(0, self.inflight - 1)
        if heavy:
            self.heavy_inflight = max(0, self.heavy_inflight - 1)

    def paced_by_learning(self) -> bool:
        """No configured rate: a 429 teaches this node a rate."""
        return self.max_rps is None

    def rate_limited(self, now: float) -> bool:
        """A 429 from a node without a configured rate: learn one from what it
        was sent in its window (this process's calls). Whether a rate paces it now."""
        if self.max_rps is not None:
            return False
        self.learned = learned.cut(self.learned, now, self.recent(now))
        return self.learned is not None


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
        leave_for_probes: bool = False,
    ) -> None:
        self.clock = clock
        self.adaptive = adaptive
        self.synchronous = True  # (SharedBudgets: a Redis round trip)
        # heavy reads (answers priced by their bytes) in flight per node at most
        # (0: no cap), so a node's other threads stay free for light calls
        self.heavy_per_node = heavy_per_node
        calls, requests = (PROBE_CALLS, PROBE_REQUESTS) if leave_for_probes else (0, 0)
        self.nodes: dict[str, NodeBudget] = {
            e.id: NodeBudget(
                proxy_share(e.max_rps, calls), proxy_share(e.max_concurrency, requests)
            )
            for e in endpoints
        }

    def inherit(self, old: Budgets) -> None:
        """Learned rates, the window and calls in flight outlive a config
        reload: a node kept is the same ``NodeBudget`` (the old book's calls
        still in flight end into it), with the new config's limits."""
        for eid, node in self.nodes.items():
            prev = old.nodes.get(eid)
            if prev is not None:
                prev.max_rps, prev.max_concurrency = node.max_rps, node.max_concurrency
                self.nodes[eid] = prev

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
        self,
        endpoint: str,
        calls: int,
        heavy: bool = False,
        retry: bool = False,
        room: int = 0,
        share: int = 1,
        whole: bool = False,
    ) -> Ticket | float:
        """A ticket if ``calls`` fit in the node's budget now (they are counted
        until the ticket is released, and a window after), else the seconds
        until they may. ``heavy``: a read priced by its bytes; ``retry``: a
        failover attempt (a learned rate does not hold it back); ``room``:
        under a learned rate, leave this many calls free (``PROBE_ROOM``);
        ``share``: this process's part of a configured budget is 1/``share``;
        ``whole``: an upstream batch, paced and counted whole (``wait_s``)."""
        now = self.clock()
        node = self.node(endpoint)
        wait = node.wait_s(now, calls, retry, room, share, whole)
        if self.heavy_full(endpoint, heavy):
            wait = max(wait, CONCURRENCY_POLL_S)
        if wait > 0:
            return wait
        heavy = heavy and self.heavy_per_node > 0
        node.take(now, calls, heavy)
        return Ticket(endpoint, heavy=heavy, calls=max(1, calls))

    def release(self, ticket: Ticket) -> None:
        """The ticket's attempt ended (answered, failed, timed out or given up):
        its calls count one window more, from now."""
        self.node(ticket.endpoint).release(self.clock(), ticket.calls, ticket.heavy)

    def learns(self, endpoint: str) -> bool:
        """A 429 from this node teaches it a rate (adaptive, no ``max_rps``)."""
        return self.adaptive and self.node(endpoint).paced_by_learning()

    def rate_limited(self, endpoint: str, untaught: Callable[[], object] | None = None) -> None:
        """A 429 from ``endpoint``: its learned rate is cut. ``untaught`` is
        called when no rate paces the node after it (a 429 at a trickle: the
        caller pauses the node instead)."""
        paced = self.adaptive and self.node(endpoint).rate_limited(self.clock())
        if not paced and untaught is not None:
            untaught()

    def snapshot(self) -> dict[str, dict[str, float | int | None]]:
        """Per node with a budget: the rate in force, calls in its window (in
        flight or ended within it), in flight (the metrics and the dashboard)."""
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
