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


def test_the_suite_skips_without_node(tmp_path: Path) -> None:
    env = {**os.environ, "PATH": str(tmp_path)}  # no node, no npm
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "tests/clients/test_chopsticks_quirks.py",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5 skipped" in done.stdout
    assert "node is not installed" in done.stdout
