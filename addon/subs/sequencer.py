"""No gap and no duplicate in a stream of notifications, across upstream
changes (pure).

``HeadSequencer`` watches the headers delivered to the clients of one head
subscription. For each header that arrives from whichever node now feeds it:

* the next number, or the first ever: deliver;
* a number past the next one (the stream moved to a node after blocks went
  by unseen): fill the heights in between first (new and finalized heads:
  their chain has no holes), then deliver;
* a number already delivered, with the same header: a duplicate (a new node
  repeats its current head when subscribed), dropped;
* a number already delivered with another header: a reorg, delivered as a
  node would.

``ValueSequencer`` does the same for value streams (runtime version, storage):
after a resubscription the new node sends its current value, delivered only
when it differs from the last one delivered.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Literal

from addon.rpc.blocks import parse_height

MAX_FILL = 256  # heights fetched to close one gap; past that only the new head is sent
_KEEP = 512  # delivered headers remembered, by number, to tell duplicates from reorgs


@dataclass(frozen=True, slots=True)
class Step:
    action: Literal["deliver", "drop", "fill"]
    fill: tuple[int, ...] = ()  # heights to fetch and deliver first (action "fill")


class HeadSequencer:
    def __init__(self, *, fill_gaps: bool = True) -> None:
        self.fill_gaps = fill_gaps  # all heads: forks interleave, a gap is no gap
        self.last: int | None = None  # highest number delivered
        self._seen: OrderedDict[int, Any] = OrderedDict()

    def consider(self, header: Any) -> Step:
        """What to do with one header from upstream (``delivered`` must be
        called for each header that is then sent to the clients)."""
        n = parse_height(header.get("number")) if isinstance(header, dict) else None
        if n is None:
            return Step("drop")  # not a header: never shown to clients
        if self.last is None:
            return Step("deliver")
        if n in self._seen and self._seen[n] == header:
            return Step("drop")
        if n > self.last + 1 and self.fill_gaps:
            start = max(self.last + 1, n - MAX_FILL)
            return Step("fill", tuple(range(start, n)))
        return Step("deliver")

    def delivered(self, header: dict[str, Any]) -> None:
        n = parse_height(header.get("number"))
        if n is None:
            return
        self._seen[n] = header
        self._seen.move_to_end(n)
        while len(self._seen) > _KEEP:
            self._seen.popitem(last=False)
        if self.last is None or n > self.last:
            self.last = n
        elif n < self.last:
            # A reorg to a shorter chain: what was above it is no longer the chain.
            for k in [k for k in self._seen if k > n]:
                del self._seen[k]
            self.last = n

    def current(self) -> Any:
        """The last header delivered (what a new subscriber gets at once)."""
        return self._seen[self.last] if self.last is not None and self.last in self._seen else None


class ValueSequencer:
    def __init__(self) -> None:
        self.value: Any = None
        self.has_value = False

    def consider(self, value: Any) -> Step:
        if self.has_value and value == self.value:
            return Step("drop")
        return Step("deliver")

    def delivered(self, value: Any) -> None:
        self.value, self.has_value = value, True

    def current(self) -> Any:
        return self.value if self.has_value else None


class StorageSequencer:
    """Storage notifications are ``{block, changes: [[key, value], …]}`` with only
    the keys that changed in that block; the state is the merged key → value.
    A notification that changes nothing (a new node's first one, after a
    resubscription) is dropped."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.block: Any = None

    def consider(self, result: Any) -> Step:
        changes = _changes(result)
        if changes is None:
            return Step("deliver")  # not the shape we know: pass it on untouched
        if self.values and all(self.values.get(k, _MISSING) == v for k, v in changes):
            return Step("drop")
        return Step("deliver")

    def delivered(self, result: Any) -> None:
        for k, v in _changes(result) or ():
            self.values[k] = v
        self.block = result.get("block") if isinstance(result, dict) else None

    def current(self) -> Any:
        if not self.values:
            return None
        return {"block": self.block, "changes": [[k, v] for k, v in self.values.items()]}


_MISSING = object()


def _changes(result: Any) -> list[tuple[str, Any]] | None:
    changes = result.get("changes") if isinstance(result, dict) else None
    if not isinstance(changes, list):
        return None
    out = []
    for c in changes:
        if not (isinstance(c, list) and len(c) == 2 and isinstance(c[0], str)):
            return None
        out.append((c[0].lower(), c[1]))
    return out
