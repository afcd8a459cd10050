"""The node's own log of arrivals: one entry per HTTP request or WebSocket
message, in arrival order, with when it arrived, its calls' methods and who
sent it (``GET /_sim/arrivals``), and whether the ``limit_rps`` fault refused
it (``refused``: answered 429), so a benchmark can say whose calls met the
node's limit.

It is what a node's owner would read to check a promise such as "at most 20
calls a second": ``busiest`` finds the sliding window (``(t - window_s, t]``,
the node's ``max_rps_seen``) holding the most calls, and returns its entries,
so a test that finds a budget exceeded can say which calls did it and whose
they were (the proxy's ``User-Agent: chainproxy``, the sidecar's aiohttp, a
test's urllib).

The log keeps the newest ``max_kept`` entries (bounded however long a
benchmark runs); ``reset`` clears it with the other counters."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

MAX_KEPT = 20_000
# of a batch: its first methods (and ``calls`` says how many in all); as many as
# chainproxy sends in one (``proxy.max_batch``), so counts by method stay exact
METHODS_KEPT = 100


@dataclass(frozen=True, slots=True)
class Arrival:
    t: float  # the node's clock (unix seconds) when the request was read
    transport: str  # "http" or "ws"
    calls: int  # calls in it (a batch's entries)
    methods: tuple[str, ...]  # the first calls' methods ("" for an invalid entry)
    agent: str  # the sender's User-Agent (a WebSocket message: its upgrade's)
    peer: str  # the sender's address and port: one connection
    refused: bool = False  # answered 429 by the ``limit_rps`` fault

    def to_json(self) -> dict[str, Any]:
        return {
            "t": self.t,
            "transport": self.transport,
            "calls": self.calls,
            "methods": list(self.methods),
            "agent": self.agent,
            "peer": self.peer,
            "refused": self.refused,
        }


class ArrivalLog:
    __slots__ = ("_kept", "dropped")

    def __init__(self, max_kept: int = MAX_KEPT) -> None:
        self._kept: deque[Arrival] = deque(maxlen=max_kept)
        self.dropped = 0  # entries pushed out by newer ones since the last ``clear``

    def add(self, arrival: Arrival) -> None:
        if len(self._kept) == self._kept.maxlen:
            self.dropped += 1
        self._kept.append(arrival)

    def entries(self, since: float | None = None) -> list[Arrival]:
        """Oldest first; those that arrived after ``since`` when given."""
        if since is None:
            return list(self._kept)
        return [a for a in self._kept if a.t > since]

    def clear(self) -> None:
        self._kept.clear()
        self.dropped = 0

    def to_json(self, since: float | None = None) -> dict[str, Any]:
        return {"dropped": self.dropped, "arrivals": [a.to_json() for a in self.entries(since)]}


def busiest(
    arrivals: list[dict[str, Any]], window_s: float = 1.0
) -> tuple[int, list[dict[str, Any]]]:
    """The most calls in any window ``(t - window_s, t]`` (as ``max_rps_seen``
    counts them) and the arrivals in the first such window, oldest first.
    ``arrivals``: ``/_sim/arrivals``' entries, oldest first."""
    best, best_span = 0, (0, 0)
    start, in_window = 0, 0
    for end, a in enumerate(arrivals):
        in_window += a["calls"]
        while arrivals[start]["t"] <= a["t"] - window_s:
            in_window -= arrivals[start]["calls"]
            start += 1
        if in_window > best:
            best, best_span = in_window, (start, end + 1)
    return best, arrivals[best_span[0] : best_span[1]]
