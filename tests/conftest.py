"""Fixtures every test directory may use, and the CI rule that a skip is a failure."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.redis_server import redis_server  # noqa: F401  (a real redis-server, per test)

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
