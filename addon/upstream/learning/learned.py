"""A node's learned rate: the limit it enforces without saying, found from
its 429s (pure; time is passed in).

AIMD, the shape TCP uses to share a link it is not told the capacity of,
with the node's own count as the signal:

* **Cut** (multiplicative decrease): a 429 while the node was sent ``seen``
  calls in its window (every proxy's, with Redis) says its limit is about
  ``seen``: the rate becomes ``CUT`` of the lower of ``seen`` and the rate in
  force. One cut per burst (``CUT_EVERY_S``): the other 429s of the same
  burst were sent before the cut. A 429 while the node was sent fewer than
  ``MIN_SEEN`` calls says little about a rate (a daily quota, a hiccup): it
  teaches nothing (the node's back-off answers it).
* **Probe** (additive increase): while the node is *full* (the rate held a
  call back within the last second), the rate grows: quickly
  (``FAST_PER_S``) back to one call below where the last 429 came (the
  ``ceiling``: the limit, about), then by ``GROW_PER_S`` of itself (at least
  ``MIN_STEP_PER_S`` calls) per second, so it creeps up past the limit by
  one call, which the next 429 cuts again. A node that is not
  full does not grow: its demand is below the rate, nothing is learnt by
  raising it, and when demand rises it meets the rate, not the limit.
* **Forget**: ``FORGET_S`` without a 429, the rate is dropped (the node is
  unlimited again until it says otherwise).

So a node full at its limit ``L`` is sent ``L`` calls a second but for a
second or so after each cut, and gets one probing 429 per
~``1 / (L * GROW_PER_S)`` seconds full (``1 / MIN_STEP_PER_S`` below 12 calls
a second): about 4 per 1,000 calls it is sent.
``addon/upstream/learning/shared_learned.py`` runs the same rules in Lua on Redis's
clock, with these constants as its arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

CUT = 0.9  # after a 429: this share of what the node was sent in its window
CUT_EVERY_S = 1.0  # one cut per burst of 429s
MIN_SEEN = 5  # fewer calls in the window: the 429 teaches no rate
GROW_PER_S = 0.004  # while full: this share of the rate more per second
MIN_STEP_PER_S = 0.05  # and at least this many calls a second more per second
FAST_PER_S = 0.1  # below the ceiling less one call: this share more per second
MIN_FAST_STEP_PER_S = 0.5  # and at least this many calls a second more per second
MAX_ACCRUE_S = 1.0  # growth between two looks at a full node counts at most this long
FORGET_S = 60.0  # this long without a 429: forgotten (a limit lifted)
CEILING = 100_000.0  # a rate grown past this is dropped: unlimited again


@dataclass(frozen=True, slots=True)
class Learned:
    rate: float  # calls in any second as the node counts them
    cut_at: float  # the last 429 that taught (or cut) it
    grown_at: float  # the last time the rate held a call back: growth counts from here
    ceiling: float = 0.0  # the window the last cut was taken from: the limit, about


def alive(state: Learned | None, now: float) -> Learned | None:
    """The state, or None once forgotten or grown past any limit."""
    if state is None or now - state.cut_at > FORGET_S or state.rate > CEILING:
        return None
    return state


def cut(state: Learned | None, now: float, seen: int) -> Learned | None:
    """A 429 while ``seen`` calls were in the node's window. The new state
    (the same one inside a burst; None when nothing is learnt)."""
    state = alive(state, now)
    if state is not None and now - state.cut_at < CUT_EVERY_S:
        return state  # the other 429s of the same burst
    if state is None and seen < MIN_SEEN:
        return None
    base = float(seen) if state is None else min(state.rate, float(seen or state.rate))
    return Learned(max(1.0, base * CUT), now, now, base)


def grow(state: Learned, now: float) -> Learned:
    """The rate held a call back (the node is full): it grows for the time
    since it last did (at most ``MAX_ACCRUE_S``: a node full now and then
    grows only for the seconds it was full, about)."""
    dt = min(max(0.0, now - state.grown_at), MAX_ACCRUE_S)
    below = state.ceiling - 1
    if state.rate < below:  # back to the limit, about: quickly
        rate = state.rate + max(MIN_FAST_STEP_PER_S, state.rate * FAST_PER_S) * dt
        return replace(state, rate=min(rate, below), grown_at=now)
    step = max(MIN_STEP_PER_S, state.rate * GROW_PER_S) * dt
    return replace(state, rate=state.rate + step, grown_at=now)


def args() -> tuple[float, ...]:
    """The constants, in the order the Lua scripts take them."""
    return (
        CUT,
        CUT_EVERY_S,
        MIN_SEEN,
        GROW_PER_S,
        MIN_STEP_PER_S,
        MAX_ACCRUE_S,
        FORGET_S,
        CEILING,
        FAST_PER_S,
        MIN_FAST_STEP_PER_S,
    )
