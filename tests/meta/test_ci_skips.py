"""Under CI=true a skip is a failure naming what is missing (tests/conftest.py); off CI
a skip stays a skip. Run in a child pytest over a throw-away test tree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

TESTS = """
import pytest

def test_needs_a_tool():
    pytest.skip("frobnicator is not installed")

@pytest.mark.skipif(True, reason="redis-server is not installed")
def test_marked():
    pass

@pytest.mark.xfail(reason="a known bug", strict=True)
def test_expected_failure():
    assert False

def test_plain():
    assert True
"""

MODULE_SKIP = """
import pytest
pytest.importorskip("no_such_module_here", reason="no_such_module_here is missing")

def test_never():
    pass
"""


def _run(tmp_path: Path, ci: str | None, tests: str = TESTS) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_make_collect_report, pytest_runtest_makereport\n"
    )
    (tmp_path / "test_tools.py").write_text(tests)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "CHAINPROXY_ALLOW_SKIPS")}
    env["PYTHONPATH"] = str(REPO)
    if ci is not None:
        env["CI"] = ci
    argv = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider"]
    # without hypothesis' plugin, which none of these tests uses: its import is
    # most of a child pytest's start (~1 s of CPU of the ~1.3 s)
    argv += ["-p", "no:hypothesispytest", str(tmp_path)]
    return subprocess.run(
        argv,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_under_ci_a_skip_fails_naming_what_is_missing(tmp_path: Path) -> None:
    r = _run(tmp_path, "true")
    out = r.stdout + r.stderr
    assert r.returncode == 1, out
    assert "frobnicator is not installed" in out
    assert "redis-server is not installed" in out
    assert "skipped under CI=true" in out
    assert "1 passed" in out and "1 xfailed" in out, out  # xfail is not a missing tool
    assert " skipped" not in r.stdout.strip().splitlines()[-1], out


def test_under_ci_a_module_skip_is_a_collection_error(tmp_path: Path) -> None:
    r = _run(tmp_path, "true", MODULE_SKIP)
    out = r.stdout + r.stderr
    assert r.returncode == 2, out  # pytest stops at a collection error: nothing runs unsaid
    assert "skipped under CI=true" in out and "no_such_module_here is missing" in out, out


def test_off_ci_a_skip_stays_a_skip(tmp_path: Path) -> None:
    r = _run(tmp_path, None)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "2 skipped" in r.stdout.strip().splitlines()[-1], out
    r = _run(tmp_path, None, MODULE_SKIP)
    assert r.returncode == 5 and "1 skipped" in r.stdout, r.stdout  # the module, skipped
