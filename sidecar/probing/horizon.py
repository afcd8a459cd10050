"""How far back a node's state goes, its horizon, measured by probes (pure).

A pruned ("lite") node keeps the state of its last K blocks: it answers the
hash of an old block but "State already discarded" for the state at it. An
archive keeps every block's. A node synced from a snapshot keeps every block's
from some block X on. None of this is taken from the config: each full probe
of a node checks the state at a few blocks (``sidecar.probing.probes.state``)
and the readings are folded in here, round after round:

* block 1 (the full probe's archive check): its state held means an archive,
  horizon 0 (genesis);
* otherwise two models are kept side by side, each a ``Bracket`` of what was
  seen held and what was seen lost, in its own ordinate, where a smaller one is
  nearer the head: held at x means held at every x' <= x, lost at x lost at
  every x' >= x.

  - ``window`` ("keeps the last K blocks"): x = the node's best - the block;
  - ``fixed`` ("every block's from X on"): x = -the block.

  At one moment both say the same; the chain advancing tells them apart: a
  pruned node's edge moves up with its best (the fixed model is refuted when a
  block seen held is later seen lost), a snapshot node's stays (the window is
  refuted when a depth seen lost is later seen held). A refuted model starts
  again from the reading that refuted it and is no longer the node's; the
  other one is. Both refuted: the node changed, both start again.
  A window reading that contradicts its bracket by less than ``EDGE`` blocks
  is the head moving between two reads (or finality lag: Substrate prunes
  behind finality): the end it contradicts is looked for again instead.
* ``plan``: the blocks the next round checks, at most ``STATE_CHECKS``: the
  depths 64 and 256 first; while an end is unknown or far, the block next to
  the one known and one 4x deeper (or shallower); then points splitting the
  bracket, and once it is one block wide its two ends again (re-verified
  every round: the horizon of a pruned node moves up as the chain advances).
  While the model is unknown, one point of each model's. A block the proxies
  saw the node answer "discarded" for (``reported``) is checked first.

``earliest``: the earliest block whose state the node is known to hold (what
routing sends reads at, ``keeps`` of the window model making it move with the
best); ``latest_lost``: the latest block known to be without state.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

STATE_CHECKS = 2  # blocks a full probe checks besides block 1: the calls it costs is twice this
FIRST_DEPTHS = (64, 256, 1024, 4096, 16384, 65536, 262144, 1048576)
LADDER = 4  # how much deeper (or shallower) the next depth is while an end is unknown
EDGE = 3  # blocks: a window contradiction this small shifts the bracket, not refutes it
SETTLE = 2 * EDGE  # blocks the chain advances with a fixed edge unmoved: not a pruned node

Model = Literal["archive", "window", "fixed", "unknown"]


@dataclass(frozen=True, slots=True)
class Bracket:
    held: int | None = None  # the largest ordinate seen held
    lost: int | None = None  # the smallest ordinate seen lost
    refuted: bool = False  # a reading contradicted it: not the node's model

    @property
    def exact(self) -> bool:
        return self.held is not None and self.lost is not None and self.lost - self.held == 1

    def see(self, x: int, held: bool, edge: int) -> Bracket:
        """The bracket after a reading at ordinate ``x``."""
        if held:
            if self.lost is not None and x >= self.lost:
                if x - self.lost < edge:  # where the lost end is is to be found again
                    return replace(self, held=x, lost=None)
                return Bracket(held=x, refuted=True)
            return replace(self, held=x if self.held is None else max(self.held, x))
        if self.held is not None and x <= self.held:
            if self.held - x < edge:  # where the held end is is to be found again
                return replace(self, held=None, lost=x)
            return Bracket(lost=x, refuted=True)
        return replace(self, lost=x if self.lost is None else min(self.lost, x))


@dataclass(frozen=True, slots=True)
class Horizon:
    archive: bool | None = None  # block 1's state held (the full probe's archive check)
    window: Bracket = Bracket()  # ordinate: depth below the node's best
    fixed: Bracket = Bracket()  # ordinate: minus the block number
    rounds: int = 0  # readings folded in: the routing snapshot's ``horizon_rounds``
    best: int | None = None  # the node's best at the last reading
    fixed_from: int | None = None  # the node's best when ``fixed`` last changed

    @property
    def model(self) -> Model:
        """``window`` once the fixed model is refuted; ``fixed`` once its edge,
        found to the block, has held while the chain advanced ``SETTLE`` blocks
        (a pruned node's would have moved)."""
        if self.archive:
            return "archive"
        window, fixed = self.window, self.fixed
        if fixed.refuted and not window.refuted and window.held is not None:
            return "window"
        if not fixed.refuted and fixed.exact and self.best is not None:
            if self.fixed_from is not None and self.best - self.fixed_from >= SETTLE:
                return "fixed"
        return "unknown"

    @property
    def keeps(self) -> int | None:
        """K of a node that keeps the state of its last K blocks, once the
        probes have said so (at least that many while not ``exact``)."""
        held = self.window.held
        return held + 1 if self.model == "window" and held is not None else None

    @property
    def exact(self) -> bool:
        """The model is known and its edge found to the block."""
        m = self.model
        return (
            m == "archive"
            or (m == "window" and self.window.exact)
            or (m == "fixed" and self.fixed.exact)
        )

    def earliest(self, best: int | None) -> int | None:
        """The earliest block whose state the node is known to hold, at its
        ``best``: what both live models agree on (None: not known yet)."""
        if self.archive:
            return 0
        found = []
        window, fixed = self._live()
        if window and self.window.held is not None and best is not None:
            found.append(max(0, best - self.window.held))
        if fixed and self.fixed.held is not None:
            found.append(-self.fixed.held)
        return max(found) if found else None

    def _live(self) -> tuple[bool, bool]:
        """Which models speak for the node: its own, or both not refuted."""
        model = self.model
        if model != "unknown":
            return model == "window", model == "fixed"
        return not self.window.refuted, not self.fixed.refuted

    def latest_lost(self, best: int | None) -> int | None:
        """The latest block known to be without state at ``best`` (what both
        live models agree on; None: none known)."""
        if self.archive:
            return None
        found = []
        window, fixed = self._live()
        if window and self.window.lost is not None and best is not None:
            found.append(best - self.window.lost)
        if fixed and self.fixed.lost is not None:
            found.append(-self.fixed.lost)
        return min(found) if found else None

    def to_json(self) -> dict[str, Any]:
        def bracket(b: Bracket) -> dict[str, Any]:
            return {"held": b.held, "lost": b.lost, "refuted": b.refuted}

        return {
            "archive": self.archive,
            "window": bracket(self.window),
            "fixed": bracket(self.fixed),
            "rounds": self.rounds,
            "best": self.best,
            "fixed_from": self.fixed_from,
        }


def horizon_from_json(raw: Any) -> Horizon:
    """A stored horizon, type-checked (``ValueError`` when damaged)."""
    if not isinstance(raw, Mapping):
        raise ValueError("horizon is not an object")

    def opt_int(v: Any, what: str) -> int | None:
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise ValueError(f"horizon {what} is not an integer")
        return v

    def bracket(v: Any, what: str) -> Bracket:
        if not isinstance(v, Mapping) or not isinstance(v.get("refuted", False), bool):
            raise ValueError(f"horizon {what} is not a bracket")
        return Bracket(
            opt_int(v.get("held"), what), opt_int(v.get("lost"), what), v.get("refuted", False)
        )

    archive = raw.get("archive")
    if archive is not None and not isinstance(archive, bool):
        raise ValueError("horizon archive is not a boolean")
    rounds = raw.get("rounds", 0)
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
        raise ValueError("horizon rounds is not a count")
    return Horizon(
        archive,
        bracket(raw.get("window", {}), "window"),
        bracket(raw.get("fixed", {}), "fixed"),
        rounds,
        opt_int(raw.get("best"), "best"),
        opt_int(raw.get("fixed_from"), "fixed_from"),
    )


def observe(
    h: Horizon, best: int, checks: Iterable[tuple[int, bool]], archive: bool | None = None
) -> Horizon:
    """Fold one round's readings taken at the node's ``best``: ``checks`` are
    (block, its state held), ``archive`` the full probe's verdict on block 1
    (None: it said nothing)."""
    if archive is True:
        return Horizon(archive=True, rounds=h.rounds + 1, best=best)
    points = [(n, held) for n, held in checks if 0 <= n <= best]
    if archive is False:
        points.append((1, False))
        if h.archive:  # it was an archive: what was known is of another node
            h = Horizon(rounds=h.rounds)
    if not points:
        return h
    window, fixed = h.window, h.fixed
    for n, held in points:
        window = window.see(best - n, held, EDGE)
        fixed = fixed.see(-n, held, 0)
    if window.refuted and fixed.refuted:  # neither describes the node any more
        window, fixed = replace(window, refuted=False), replace(fixed, refuted=False)
    fixed_from = h.fixed_from if fixed == h.fixed and h.fixed_from is not None else best
    archived = False if archive is False else h.archive
    return Horizon(archived, window, fixed, h.rounds + 1, best, fixed_from)


def plan(h: Horizon, best: int | None, reported: int | None = None) -> tuple[int, ...]:
    """The blocks (2 .. best - 1) whose state the next round checks, at most
    ``STATE_CHECKS``: ``reported`` first (a block the proxies saw the node
    answer "discarded" for) unless already known lost, then the model's."""
    if best is None or best < 3:
        return ()
    out: list[int] = []
    if reported is not None:
        lost = h.latest_lost(best)
        if lost is None or reported > lost:
            out.append(reported)
    model = h.model
    window = [best - x for x in _window_points(h.window, best - 1)]
    fixed = _fixed_points(h.fixed, best)
    if model == "window":
        out += window
    elif model == "fixed":
        out += fixed
    elif model == "unknown":  # a point for each: both narrow down, and one is refuted
        out += fixed + window if h.window.refuted else window[:1] + fixed[:1] + window[1:]
    picked: list[int] = []
    for n in out:
        if 1 < n < best and n not in picked:
            picked.append(n)
    return tuple(picked[:STATE_CHECKS])


def _window_points(b: Bracket, cap: int) -> list[int]:
    """Depths to check (``cap``: block 1's depth, checked by the archive check)."""
    held, lost = b.held, b.lost
    if held is None:
        if lost is None or lost > FIRST_DEPTHS[1] * LADDER:  # the usual depths first
            return [d for d in FIRST_DEPTHS if d < min(cap, lost or cap)][:STATE_CHECKS]
        # next to the end seen lost (it is often just there), and well below it
        below = [d for d in FIRST_DEPTHS if d < lost - 1]
        return [lost - 1, below[-1] if below else lost // LADDER]
    end = cap + 1 if lost is None else lost
    if end - held <= 1:
        return [end, held]  # the edge again: does it still hold (and move as it should)?
    if end > max(held, 1) * LADDER**2:  # far apart: next to the end seen held, 4x deeper
        return [held + 1, max(held, 1) * LADDER]
    return _between(held, end, STATE_CHECKS)


def _fixed_points(b: Bracket, best: int) -> list[int]:
    """Blocks to check of a node that keeps every block's state from one on
    (none while either end is unknown or the model refuted)."""
    if b.held is None or b.lost is None or b.refuted:
        return []
    held, lost = -b.held, -b.lost
    if best - lost > max(best - held, 1) * LADDER**2:
        return []  # far apart: the window's depths find the edge sooner
    if held - lost <= 1:
        return [held, lost]  # a pruned node's edge moves past the block seen held
    return _between(lost, held, STATE_CHECKS)


def _between(lo: int, hi: int, k: int) -> list[int]:
    """Up to ``k`` integers strictly between ``lo`` and ``hi``, splitting it evenly."""
    points = (lo + (hi - lo) * i // (k + 1) for i in range(1, k + 1))
    return list(dict.fromkeys(p for p in points if lo < p < hi))
