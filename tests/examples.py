"""How many examples a property test draws: its own count under ``make test``,
``EXPLORE_FACTOR`` times that under ``make explore`` (``CHAINPROXY_EXPLORE=1``),
so the hunt for a rare failing example covers the tests that set a count of
their own, not only those on hypothesis's default (the ``explore`` profile of
``tests/conftest.py`` raises that one by the same factor)."""

from __future__ import annotations

import os

EXPLORE_FACTOR = 20
EXPLORE_ENV = "CHAINPROXY_EXPLORE"


def examples(n: int) -> int:
    return n * EXPLORE_FACTOR if os.environ.get(EXPLORE_ENV) else n
