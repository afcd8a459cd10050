"""Fixtures every test directory may use, and the CI rule that a skip is a failure."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

from bench.stack import ProcessStack
from chainproxy.supervisor import PORT_RANGE_ENV, SIDE_BY_SIDE_PORTS, port_slices
from tests.redis_server import redis_server  # noqa: F401  (a real redis-server, per test)
from tests.zygote_client import Zygote

# Ports for the processes the tests start: each parallel worker (pytest-xdist,
# `make test`) gets a slice of its own of the base range, the caller's
# ``$CHAINPROXY_PORTS`` when set, else ``SIDE_BY_SIDE_PORTS`` (below the kernel's
# ephemeral ports). The base is kept for the workers: the controller process
# (``pytest -n 2``) imports this file too, before it starts its workers, and they
# inherit its environment. Inheriting the controller's range as theirs, two
# workers picked from one range and took each other's ports between pick and
# bind (CI stop 47).
PORTS_BASE_ENV = "CHAINPROXY_PORTS_BASE"


def port_base() -> tuple[int, int]:
    """The range the workers cut (lo, hi, both included)."""
    lo, _, hi = os.environ.get(PORTS_BASE_ENV, "").partition("-")
    if lo.isdigit() and hi.isdigit() and int(lo) < int(hi):
        return int(lo), int(hi)
    return SIDE_BY_SIDE_PORTS


def _worker_ports() -> str:
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) if worker.isdigit() else 0
    return port_slices(max(1, count), port_base())[min(index, max(1, count) - 1)]


if PORTS_BASE_ENV not in os.environ:  # the first process of the run: the controller
    lo, hi = SIDE_BY_SIDE_PORTS
    os.environ[PORTS_BASE_ENV] = os.environ.get(PORT_RANGE_ENV) or f"{lo}-{hi}"
os.environ[PORT_RANGE_ENV] = _worker_ports()

# The mitmdump, sidecar and simulated-node processes the tests start fork from
# one interpreter per worker that imported them once (tests/zygote.py: each
# start spends 0.6 to 2 s of CPU on the same imports); CHAINPROXY_TEST_ZYGOTE=0
# starts each afresh (docs/OPERATIONS.md, Tests).
ZYGOTE = Zygote() if os.environ.get("CHAINPROXY_TEST_ZYGOTE", "1") != "0" else None
ProcessStack.spawner = ZYGOTE.spawn if ZYGOTE is not None else None

# Property tests: ``make test`` draws new random examples each run (a fresh
# clone has no example database), so a property that fails on a rare example
# is a flaky CI. ``make explore`` (this profile: 20x hypothesis's default of
# 100, no database; ``tests/examples.py`` multiplies the counts tests set
# themselves) is how such examples are hunted down before they reach CI;
# what it finds is pinned as an ``@example``.
settings.register_profile("explore", max_examples=2000, database=None, deadline=None)
# Every run: no per-example deadline (hypothesis's 200 ms). An example stalled past
# it by a loaded machine, that then passes on replay, is "Unreliable test timings",
# a failure; a property is about answers, never speed. ``--hypothesis-profile``
# (the plugin loads it after this file) still picks another.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

# CI must run the whole suite or say it did not: with CI set (CI=true, as CI runs
# `.ci/run`), a test that would be skipped for a missing tool (redis-server, haproxy,
# npm, chromium, tmpfs, a client venv) fails instead, naming what is missing.
# CHAINPROXY_ALLOW_SKIPS=1 lifts the rule for a run on a machine known to lack a tool.
_STRICT = os.environ.get("CI", "").lower() not in ("", "0", "false", "no") and os.environ.get(
    "CHAINPROXY_ALLOW_SKIPS", ""
) in ("", "0")


def _why(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def _fail_skip(report: pytest.TestReport | pytest.CollectReport) -> None:
    why = _why(report).removeprefix("Skipped: ")
    report.outcome = "failed"
    report.longrepr = f"skipped under CI=true (a skip is a failure in CI): {why}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    # an expected failure (xfail) is reported as skipped too: that one is not missing tooling
    if _STRICT and report.skipped and not hasattr(report, "wasxfail"):
        _fail_skip(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    outcome = yield
    report: pytest.CollectReport = outcome.get_result()
    if _STRICT and report.skipped:  # a module-level importorskip / skip
        _fail_skip(report)


# How `make test` shares the suite between its worker processes (pytest-xdist):
# a module's tests stay together in one worker (they share its module-scoped stack),
# and so do the client tests (one chopsticks chain, a session fixture) and the
# contract modules (one stack per dispatch mode). The groups that start processes
# go first, the longest of them first, so the many small unit modules fill in at
# the end and both workers finish together. (xdist's own ``loadgroup`` marks do not
# work with pytest 9.2: it renames ``item._nodeid``, which pytest 9 no longer reads.)
_SHARED_SESSION = {
    "tests/clients/": "tests/clients",
    "tests/e2e/test_wire.py": "contract",
    "tests/e2e/test_websocket_e2e.py": "contract",
    "tests/e2e/test_open_proxy.py": "contract",
}
_FIRST = ("tests/clients", "tests/bench/", "tests/e2e/test_soak_smoke.py", "tests/e2e/", "contract")


def group_of(nodeid: str) -> str:
    """The worker group of a test: its module, or the group it shares a stack with."""
    path = nodeid.split("::", 1)[0]
    for prefix, group in _SHARED_SESSION.items():
        if path.startswith(prefix):
            return group
    return path


def _rank(group: str) -> int:
    return next((i for i, p in enumerate(_FIRST) if group.startswith(p)), len(_FIRST))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

        def _assign_work_unit(self, node: Any) -> None:
            # the work queue in our order, once it is built (workers run tests by
            # their index in the collection, so the collection itself stays as is)
            if not self.ordered:
                self.ordered = True
                for scope in sorted(self.workqueue, key=_rank):  # stable
                    self.workqueue.move_to_end(scope)
            super()._assign_work_unit(node)

    config.option.loadscopereorder = False  # our order, not the count of tests
    return GroupScheduling(config, log)
