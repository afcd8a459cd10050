"""Log a failing resource once, not once per failure (pure).

A full disk makes every write of a store fail, many times a second; one log
line per failure buries everything else and says nothing new. ``Outage`` tracks
the "working → failing → working" transitions of one resource: the caller logs
when ``failed()`` says an outage began and when ``ok()`` says it ended (with
the number of failures in between); the failures in between are only counted.
"""

from __future__ import annotations


class Outage:
    __slots__ = ("failing", "failures", "total")

    def __init__(self) -> None:
        self.failing = False
        self.failures = 0  # in the current outage
        self.total = 0  # since start

    def failed(self) -> bool:
        """Note one failure; True when it begins an outage (log it)."""
        self.total += 1
        self.failures += 1
        if self.failing:
            return False
        self.failing = True
        return True

    def ok(self) -> int | None:
        """Note a success; the failures of the outage it ends (log it), else None."""
        if not self.failing:
            return None
        n, self.failing, self.failures = self.failures, False, 0
        return n
