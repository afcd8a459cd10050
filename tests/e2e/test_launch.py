"""``make demo`` / ``make run`` as an operator meets them: the launcher starts
simulated nodes, the sidecar and mitmdump, prints a curl that works, and
stops every child on SIGTERM or Ctrl-C."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.e2e.harness import REPO, free_port
from tests.e2e.helpers import demo_config, read_until_banner, two_heads

pytestmark = pytest.mark.e2e


def _children_of(config: Path) -> list[int]:
    """PIDs of the stack's processes: the sidecar and mitmdump name the config
    file, the simulated nodes their ports (listed in the config)."""
    doc = yaml.safe_load(config.read_text())
    ports = [e["url"].rsplit(":", 1)[1] for e in doc["registry"]["endpoints"]]
    marks = [str(config)] + [f"--port {p} " for p in ports]
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(m in cmd + " " for m in marks):
            out.append(int(d.name))
    return out


@pytest.mark.parametrize(
    ("sig", "sets"),
    [(signal.SIGTERM, ()), (signal.SIGINT, ("chainproxy_lean=true",))],
    ids=["sigterm", "sigint-lean"],
)
def test_demo_prints_a_working_curl_and_stops_cleanly(
    tmp_path: Path, sig: int, sets: tuple[str, ...]
) -> None:
    config = demo_config(tmp_path)
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "chainproxy.launch",
            "--config",
            str(config),
            "--simulate",
            "--listen-port",
            str(port),
            *(a for s in sets for a in ("--set", s)),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        lines = read_until_banner(proc, 60)
        text = "".join(lines)
        assert f"http://127.0.0.1:{port}/rpc/v1/finney" in text, text
        curl = next(ln.strip() for ln in lines if ln.strip().startswith("curl "))
        assert len(_children_of(config)) >= 5  # 3 nodes, sidecar, mitmdump
        if shutil.which("curl"):
            out = subprocess.run(["bash", "-c", curl], capture_output=True, text=True, timeout=20)
            answer = json.loads(out.stdout)
        else:  # the same request the printed curl makes
            import urllib.request

            body = re.search(r"-d '(.+)'", curl).group(1).encode()  # type: ignore[union-attr]
            req = urllib.request.Request(
                f"http://127.0.0.1:{port}/rpc/v1/finney",
                data=body,
                headers={"content-type": "application/json"},
            )
            answer = json.loads(urllib.request.urlopen(req, timeout=20).read())
        assert answer["id"] == 1 and int(answer["result"]["number"], 16) > 0
        assert "chain_subscribeNewHeads" in text  # the banner says how to see live heads
        heads = asyncio.run(two_heads(f"ws://127.0.0.1:{port}/rpc/v1/finney"))
        assert int(heads[1]["number"], 16) == int(heads[0]["number"], 16) + 1
        os.kill(proc.pid, sig)
        assert proc.wait(20) == 0
        text += proc.stdout.read()
        # the --set reached mitmdump (lean mode says what it unloaded)
        assert ("lean mode: " in text) == bool(sets), text[-2000:]
        deadline = time.monotonic() + 10
        while _children_of(config) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _children_of(config) == [], "orphan processes left behind"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_launcher_rejects_a_bad_config_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("proxy: {networks: [mars]}\n")
    r = subprocess.run(
        [sys.executable, "-m", "chainproxy.launch", "--config", str(bad)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "proxy.networks" in r.stderr


def test_inspect_shows_annotated_flows_in_mitmweb(tmp_path: Path) -> None:
    """``make inspect``: mitmweb's UI (with the printed token) lists each RPC
    flow with its comment: network, method, upstream, attempts, cache."""
    import urllib.request

    config = demo_config(tmp_path)
    port, web_port = free_port(), free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "chainproxy.launch",
            "--config",
            str(config),
            "--simulate",
            "--inspect",
            "--listen-port",
            str(port),
            "--web-port",
            str(web_port),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        ui = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line or "Ctrl-C stops everything" in line:
                break
            if line.startswith("mitmweb UI:"):
                ui = line.split()[-1]
        assert ui is not None and "?token=" in ui
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "system_health", "params": []})
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/rpc/v1/finney",
            data=body.encode(),
            headers={"content-type": "application/json"},
        )
        assert json.loads(urllib.request.urlopen(req, timeout=20).read())["result"]["peers"] == 8
        token = ui.split("?token=")[1]
        flows_req = urllib.request.Request(
            f"http://127.0.0.1:{web_port}/flows", headers={"Authorization": f"Bearer {token}"}
        )
        flows = json.loads(urllib.request.urlopen(flows_req, timeout=10).read())
        rpc = [f for f in flows if f["request"]["path"] == "/rpc/v1/finney"]
        assert rpc and "finney system_health" in rpc[-1]["comment"]
        assert "endpoint-srf-" in rpc[-1]["comment"] and "MISS" in rpc[-1]["comment"]
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_launcher_rejects_a_malformed_set(tmp_path: Path) -> None:
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "chainproxy.launch",
            "--config",
            str(demo_config(tmp_path)),
            "--set",
            "chainproxy_lean",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2
    assert r.stderr.strip() == "chainproxy: --set wants NAME=VALUE, got 'chainproxy_lean'"
