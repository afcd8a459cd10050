"""What ``tests/conftest.py`` sets up for every run: each parallel worker of
``make test`` picks ports from a slice of its own (two workers sharing one range
take each other's ports between a pick and a bind), and property tests have no
per-example deadline (a loaded machine's stall is not a failure)."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from chainproxy.supervisor import PORT_RANGE_ENV
from tests.conftest import _worker_ports, port_base


def test_this_worker_picks_from_its_own_slice() -> None:
    lo, hi = (int(x) for x in os.environ[PORT_RANGE_ENV].split("-"))
    assert os.environ[PORT_RANGE_ENV] == _worker_ports()
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    base_lo, base_hi = port_base()
    assert hi - lo + 1 == (base_hi - base_lo + 1) // count and base_lo <= lo < hi <= base_hi


def test_slices_of_two_workers_do_not_overlap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    slices = []
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        lo, hi = (int(x) for x in _worker_ports().split("-"))
        slices.append(range(lo, hi + 1))
    assert not set(slices[0]) & set(slices[1])
    base_lo, base_hi = port_base()
    assert slices[0][0] >= base_lo and slices[1][-1] <= base_hi


def test_property_tests_have_no_deadline(request: pytest.FixtureRequest) -> None:
    if request.config.getoption("hypothesis_profile", None):
        pytest.skip("another profile was asked for")  # never under `make test`
    assert settings.default.deadline is None
