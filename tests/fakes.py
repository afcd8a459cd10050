"""Fakes more than one test directory uses."""

from __future__ import annotations

T0 = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC: the default start of a FakeClock


class FakeClock:
    """A clock the test moves by hand: ``clock()`` is the time now (``t``, which
    a test may also set), ``advance(seconds)`` moves it on."""

    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> float:
        """Move on by ``seconds``; the new time."""
        self.t += seconds
        return self.t
