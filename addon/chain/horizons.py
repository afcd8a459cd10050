"""Which upstreams hold the state at a block (pure): the sidecar's measured
state horizons (the routing snapshot's ``horizon``, ``horizon_lost``,
``keeps``, ``horizon_rounds``) and this process's own corrections.

* ``coverage(u, n, tip)``: ``lacks`` when block ``n`` is at or below the
  latest block known to be without state (measured, or corrected here);
  ``holds`` when it is at or above the earliest block known to hold state
  (a node that keeps its last K blocks: moved up with the network's tip;
  with nothing measured yet, an upstream flagged archive counts as holding
  every block); else ``maybe``. Routing sends a read that needs the state at
  ``n`` only to nodes that do not lack it, those that hold it first.
* ``correct(u, n, reason)``: the node answered "State already discarded"
  for block ``n`` (or an unknown block, well below its best): from now on it
  lacks every block up to ``n``, at once, in this process. The proxies
  report it to the sidecar (``upstream_state_lost``), whose next full probe
  of the node checks that block; ``settle`` drops the correction once the
  sidecar's own measurement says as much, or two rounds of its checks later
  (then the sidecar's word stands).
* ``oldest_block``: the oldest block any of the upstreams is known to hold
  the state of (``known_held``: measured, and not contradicted by a block
  since found lost): what a client is told when no node holds the one it
  asked.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, Protocol

from addon.rpc.blocks import PRUNING_WINDOW

Coverage = Literal["holds", "maybe", "lacks"]

SETTLE_ROUNDS = 2  # the sidecar's rounds of checks after which its word replaces ours


class Horizoned(Protocol):
    """What this needs of an upstream (``pool.Upstream``)."""

    archive: bool
    best: int | None
    horizon: int | None
    horizon_lost: int | None
    keeps: int | None
    horizon_rounds: int
    lost_seen: int | None
    lost_seen_round: int


def latest_lost(u: Horizoned) -> int | None:
    """The latest block the node is known to be without state for."""
    known = [b for b in (u.horizon_lost, u.lost_seen) if b is not None]
    return max(known) if known else None


def _measured_start(u: Horizoned, tip: int | None) -> int | None:
    """Where the node's state starts as measured (or its keep-window says);
    with nothing measured, 0 for an upstream flagged archive."""
    first = u.horizon
    if first is None and u.archive:
        first = 0
    if first is None:
        return None
    if u.keeps is not None and tip is not None:
        first = max(first, tip - u.keeps + 1)
    return first


def earliest(u: Horizoned, tip: int | None = None) -> int | None:
    """The earliest block whose state the node is taken to hold, for routing:
    its measured start, or just after the latest block known lost."""
    first = _measured_start(u, tip)
    if first is None:
        return None
    lost = latest_lost(u)
    return first if lost is None else max(first, lost + 1)


def coverage(u: Horizoned, n: int, tip: int | None = None) -> Coverage:
    lost = latest_lost(u)
    if lost is not None and n <= lost:
        return "lacks"
    first = earliest(u, tip)
    return "holds" if first is not None and n >= first else "maybe"


def correct(u: Horizoned, n: int, reason: str = "state-discarded") -> bool:
    """The node answered a read of the state at block ``n`` with ``reason``
    (a failover verdict's): "state-discarded", or "unknown-block" for a block
    well below its best (not one it has yet to import, nor a fresh fork's),
    means it has no state there. True when that is news."""
    if reason == "unknown-block":
        if u.best is None or n >= u.best - PRUNING_WINDOW:
            return False
    elif reason != "state-discarded":
        return False
    if u.lost_seen is not None and u.lost_seen >= n:
        return False
    u.lost_seen = n
    u.lost_seen_round = u.horizon_rounds
    return True


def settle(u: Horizoned) -> None:
    """After a snapshot: a correction the sidecar's measurement has caught up
    with, or that it has checked for long enough, is dropped."""
    if u.lost_seen is None:
        return
    measured = u.horizon_lost is not None and u.horizon_lost >= u.lost_seen
    if measured or u.horizon_rounds >= u.lost_seen_round + SETTLE_ROUNDS:
        u.lost_seen = None


def known_held(u: Horizoned, tip: int | None = None) -> int | None:
    """The earliest block the node is *known* to hold the state of: its
    measured start, unless a block at or after it was since found lost; then
    where its state starts now is not known. (``earliest``'s lost + 1 is
    routing's guess, not a fact to tell a client: told it, a client walks up
    one block per refusal.)"""
    first = _measured_start(u, tip)
    lost = latest_lost(u)
    if first is None or (lost is not None and lost >= first):
        return None
    return first


def oldest_block(upstreams: Iterable[Horizoned], tip: int | None = None) -> int | None:
    known = [b for b in (known_held(u, tip) for u in upstreams) if b is not None]
    return min(known) if known else None
