"""``python -m sidecar`` as an operator runs it."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.e2e.harness import REPO, free_port

pytestmark = pytest.mark.e2e


def test_port_in_use_is_one_clear_line(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        cfg = tmp_path / "c.yaml"
        cfg.write_text(yaml.safe_dump({"sidecar": {"port": port}, "data_dir": str(tmp_path)}))
        r = subprocess.run(
            [sys.executable, "-m", "sidecar", "--config", str(cfg)],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=REPO,
        )
    assert r.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in r.stderr and "Traceback" not in r.stderr


def test_flags_override_the_file(tmp_path: Path) -> None:
    port = free_port()
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump({"sidecar": {"port": 1}, "data_dir": str(tmp_path / "x")}))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sidecar",
            "--config",
            str(cfg),
            "--port",
            str(port),
            "--data-dir",
            str(tmp_path / "d"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == f"sidecar listening on http://127.0.0.1:{port}"
        assert (tmp_path / "d").is_dir()
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
            assert resp.status == 200
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
