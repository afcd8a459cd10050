"""``python -m chainproxy.launch --workers 2`` as an operator runs it: one
address, two proxy processes behind HAProxy, a local redis-server for the one
quota, usage counted once, subscriptions through the balancer, and Ctrl-C
leaving no process behind."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from chainproxy.workers import find_tool
from tests.e2e.harness import REPO, free_port
from tests.e2e.helpers import call, demo_config, next_client_ip, post, read_until_banner, two_heads

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        find_tool("haproxy") is None or find_tool("redis-server") is None,
        reason="haproxy and redis-server are installed by `make test` (Debian packages)",
    ),
]


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (children lead process groups of their own)."""
    parents: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            parents[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    out: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - out
        out |= frontier
    return out


def _names(pids: set[int]) -> list[str]:
    names = []
    for p in pids:
        try:
            names.append(Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0].decode())
        except OSError:
            continue
    return names


def _usage(sidecar: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{sidecar}/api/v1/usage?network=finney", timeout=5) as r:
        return json.loads(r.read())


async def _traffic(url: str, sidecar: str, ips: list[str]) -> None:
    # 200 concurrent calls from 4 clients (50 each, within each quota): 0 errors
    replies = await asyncio.gather(
        *(post(url, call("system_health", id_=i), client_ip=ips[i % 4]) for i in range(200))
    )
    assert [r.status for r in replies] == [200] * 200

    # one client, one quota across both workers (the balancer's X-Forwarded-For is
    # believed, the count is in Redis): 50 already taken, 50 more pass, then 429
    seq = [await post(url, call("system_health", id_=i), client_ip=ips[0]) for i in range(60)]
    statuses = [r.status for r in seq]
    assert statuses.count(200) == 50 and statuses.count(429) == 10
    # a spoofed X-Forwarded-For does not buy a new quota
    spoofed = await post(
        url, call("system_health"), client_ip=ips[0], headers={"X-Forwarded-For": "1.2.3.4"}
    )
    assert spoofed.status == 429

    # subscriptions through the balancer
    heads = await two_heads(url.replace("http://", "ws://"))
    assert int(heads[1]["number"], 16) == int(heads[0]["number"], 16) + 1


def test_two_workers_serve_one_address_with_one_quota(tmp_path: Path) -> None:
    config = demo_config(tmp_path)
    sidecar = f"http://127.0.0.1:{yaml.safe_load(config.read_text())['sidecar']['port']}"
    port = free_port()
    argv = [sys.executable, "-m", "chainproxy.launch", "--config", str(config), "--simulate"]
    proc = subprocess.Popen(
        [*argv, "--workers", "2", "--listen-port", str(port)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        text = "".join(read_until_banner(proc, 90))
        assert "2 proxy processes" in text and "redis-server" in text, text[-3000:]
        kids = _descendants(proc.pid)
        names = _names(kids)
        assert sum(n.endswith("python") or "mitmdump" in n for n in names) >= 2
        assert any(n.endswith("haproxy") for n in names), names
        assert any("redis-server" in n for n in names), names

        ips = [next_client_ip() for _ in range(4)]
        try:
            asyncio.run(_traffic(f"http://127.0.0.1:{port}/rpc/v1/finney", sidecar, ips))
        except AssertionError:
            os.kill(proc.pid, signal.SIGINT)
            proc.wait(30)
            print(proc.stdout.read()[-5000:])
            raise

        # usage from both workers reaches the sidecar exactly once per call
        served = 200 + 50 + 1  # the burst, one client's quota, the subscribe call
        deadline = time.monotonic() + 30
        while _usage(sidecar)["requests"] < served and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(3)  # a late duplicate would show up by now
        assert _usage(sidecar)["requests"] == served

        os.kill(proc.pid, signal.SIGINT)
        assert proc.wait(30) == 0
        deadline = time.monotonic() + 10
        while (left := {p for p in kids if Path(f"/proc/{p}").exists()}) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.1)
        assert not left, f"orphans: {_names(left)}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
