"""Times and percentages as every JSON answer shows them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sidecar.jsonfmt import iso, pct

NOW = 1_763_700_000.0


@pytest.mark.parametrize(
    ("count", "total", "expected"),
    [(0, 0, 0.0), (5, 0, 0.0), (1, 3, 33.33), (2, 3, 66.67), (3, 3, 100.0), (1, 8, 12.5)],
)
def test_pct(count: int, total: int, expected: float) -> None:
    assert pct(count, total) == expected


@given(st.integers(0, 10**9), st.integers(1, 10**9))
def test_pct_is_a_number_between_0_and_100(count: int, extra: int) -> None:
    p = pct(count, count + extra)
    assert isinstance(p, float) and 0 <= p <= 100


def test_iso() -> None:
    assert iso(None) is None
    assert iso(NOW) == "2025-11-21T04:40:00Z"
