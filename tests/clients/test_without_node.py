"""Without Node.js/npm the client tests are skipped, saying why; they never fail
obscurely (``make test`` goes on)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clients.js_deps import js_unavailable
from tests.e2e.harness import REPO


def test_the_reason_names_the_missing_tool(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert js_unavailable() == (
        "node is not installed: the real-client tests need Node.js 20+ and npm"
    )


def _run_without_node(tmp_path: Path, **env_extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "CHAINPROXY_ALLOW_SKIPS")}
    env.update(PATH=str(tmp_path), **env_extra)  # no node, no npm
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            # hypothesis' plugin is most of a child pytest's start, and unused here
            "-p",
            "no:hypothesispytest",
            "tests/clients/test_chopsticks_quirks.py",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_suite_skips_without_node(tmp_path: Path) -> None:
    done = _run_without_node(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 skipped" in done.stdout
    assert "node is not installed" in done.stdout


def test_under_ci_a_missing_node_fails_saying_so(tmp_path: Path) -> None:
    # CI must run the whole suite or say it did not (tests/conftest.py)
    done = _run_without_node(tmp_path, CI="true")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "5 errors" in done.stdout  # a fixture skips them: errors at set-up
    assert "skipped under CI=true" in done.stdout and "node is not installed" in done.stdout
