"""Calls in a sliding window of time: what the ``limit_rps`` fault admits, and
the node's own call rate (``/_sim/state``'s ``calls_in_last_s`` and
``max_rps_seen``).

A window counts the calls that arrived in ``(now - window_s, now]``. Arrivals
less than ``grain_s`` after the newest kept entry are added to it, so the log
holds at most ``window_s / grain_s + 1`` entries however fast calls come (a
call may leave the window up to ``grain_s`` early: 1 ms in a 1 s window)."""

from __future__ import annotations

from collections import deque


class SlidingWindow:
    """A count of calls over the last ``window_s`` seconds, from their arrival times."""

    __slots__ = ("_counts", "_grain", "_times", "_window", "count")

    def __init__(self, window_s: float = 1.0, grain_s: float = 0.001) -> None:
        self._window = window_s
        self._grain = grain_s
        self._times: deque[float] = deque()  # arrival time of each entry, oldest first
        self._counts: deque[int] = deque()  # calls in each entry
        self.count = 0  # calls in the window, as of the last ``expire``/``add``

    def expire(self, now: float) -> int:
        """Forget the calls that arrived ``window_s`` or more before ``now``;
        the calls left in the window."""
        times = self._times
        cutoff = now - self._window
        while times and times[0] <= cutoff:
            times.popleft()
            self.count -= self._counts.popleft()
        return self.count

    def add(self, now: float, calls: int) -> int:
        """``calls`` arrived at ``now``; the calls in the window ending at ``now``."""
        times = self._times
        if times and now - times[-1] < self._grain:
            self._counts[-1] += calls
        else:
            times.append(now)
            self._counts.append(calls)
        self.count += calls
        return self.expire(now)

    def clear(self) -> None:
        self._times.clear()
        self._counts.clear()
        self.count = 0


class CallRate:
    """The calls a node received: how many in the last window, and the most in
    any window since the last ``clear``."""

    __slots__ = ("_window", "max_seen")

    def __init__(self, window_s: float = 1.0) -> None:
        self._window = SlidingWindow(window_s)
        self.max_seen = 0

    def add(self, now: float, calls: int) -> None:
        n = self._window.add(now, calls)
        if n > self.max_seen:
            self.max_seen = n

    def in_window(self, now: float) -> int:
        return self._window.expire(now)

    def clear(self) -> None:
        self._window.clear()
        self.max_seen = 0


class WindowLimit:
    """Admits at most ``limit`` calls in any window (``limit_rps`` per 1 s).
    Only admitted calls count: a refused caller that keeps asking gets the
    limit's worth through, no fewer. A request of more calls than the limit
    is never admitted."""

    __slots__ = ("_window",)

    def __init__(self, window_s: float = 1.0) -> None:
        self._window = SlidingWindow(window_s)

    def admit(self, now: float, calls: int, limit: float) -> bool:
        if self._window.expire(now) + calls > limit:
            return False
        self._window.add(now, calls)
        return True

    def clear(self) -> None:
        self._window.clear()
