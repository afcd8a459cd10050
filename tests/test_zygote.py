"""The suite's pre-imported interpreter (``tests/zygote.py``): a child forked
from it is the process its command line would start: its own pid and
session, its log, working directory, environment and exit code, the same
words in its log as a process started afresh, and a command it does not serve
starts afresh."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chainproxy.commands import proxy_argv
from chainproxy.supervisor import spawn, wait_http
from simnode.command import simnode_argv
from tests.e2e.harness import BIN, REPO, free_port
from tests.zygote import servable
from tests.zygote_client import Forked, Zygote


@pytest.fixture
def zygote() -> Iterator[Zygote]:
    z = Zygote()
    try:
        yield z
    finally:
        z.stop()


def test_a_forked_node_serves_in_a_session_of_its_own_and_stops_as_a_fresh_one(
    zygote: Zygote, tmp_path: Path
) -> None:
    codes = []
    for start in (zygote.spawn, spawn):
        port = free_port()
        argv = simnode_argv(
            port, name="z", seed="finney", epoch=time.time(), block_time=1.0, start_height=10
        )
        child = start("node", argv, log=tmp_path / f"node-{port}.log", cwd=REPO)
        wait_http(f"http://127.0.0.1:{port}/_sim/state", child)
        assert os.getsid(child.pid) == child.pid  # leads its own session and group
        assert child.popen.poll() is None
        codes.append(child.stop(grace_s=10))
    assert zygote.started == 1
    assert codes[0] == codes[1] is not None, codes


def test_cwd_environment_and_exit_code_are_the_command_lines(
    zygote: Zygote, tmp_path: Path
) -> None:
    """A config read relative to the working directory, naming a variable of
    the environment given: forked and fresh, mitmdump says the same and exits
    with the same code, both when the variable is missing and when its value
    is wrong."""
    (tmp_path / "proxy.yaml").write_text(
        "proxy: {networks: [finney]}\n"
        "data_dir: data\n"
        "registry:\n"
        "  endpoints:\n"
        "    - {url: '${ZYGOTE_NODE_URL}', provider: p, kind: node-rpc, network: finney}\n"
    )
    argv = proxy_argv(BIN / "mitmdump", "proxy.yaml", "http://127.0.0.1:9", port=free_port())
    for env in ({}, {"ZYGOTE_NODE_URL": "not a url"}):
        outputs = []
        for start in (zygote.spawn, spawn):
            log = tmp_path / f"proxy-{len(outputs)}.log"
            child = start("proxy", argv, log=log, cwd=tmp_path, env=env)
            code = child.popen.wait(60)
            last = log.read_text().strip().splitlines()[-1:]
            outputs.append((code, [re.sub(r"^\[[\d:.]+\] ", "", line) for line in last]))
        assert outputs[0] == outputs[1] and outputs[0][0] != 0, outputs
        assert "ZYGOTE_NODE_URL" in outputs[0][1][0] or env, outputs
    assert zygote.started == 2


def test_a_command_it_does_not_serve_starts_afresh(zygote: Zygote, tmp_path: Path) -> None:
    child = zygote.spawn("other", [sys.executable, "-c", "pass"], log=tmp_path / "o.log")
    assert isinstance(child.popen, subprocess.Popen) and child.popen.wait(30) == 0
    assert zygote.started == 0 and zygote.proc is None  # nor is the zygote started for it
    env = {k: v for k, v in os.environ.items() if k.startswith("PYTHON")}
    node = [sys.executable, "-m", "simnode"]
    assert servable(node, {}, None, {}) and not servable(node, {}, {0}, {})
    assert not servable(node, {**env, "PYTHONPATH": "/elsewhere"}, None, env)


def test_a_forked_childs_wait_times_out_and_signals_reach_it(
    zygote: Zygote, tmp_path: Path
) -> None:
    port = free_port()
    argv = simnode_argv(
        port, name="z", seed="finney", epoch=time.time(), block_time=1.0, start_height=1
    )
    child = zygote.spawn("node", argv, log=tmp_path / "n.log", cwd=REPO)
    assert isinstance(child.popen, Forked)
    for timeout in (0.2, 0):  # Popen's wait(0): a look, then TimeoutExpired
        with pytest.raises(subprocess.TimeoutExpired):
            child.popen.wait(timeout)
    assert child.alive()
    child.popen.kill()
    assert child.popen.wait(10) == -9
    assert not child.alive()


def test_a_running_childs_log_is_written_as_a_fresh_ones(zygote: Zygote, tmp_path: Path) -> None:
    """The tests read logs of processes that still run: a forked child's
    streams are buffered as a fresh interpreter's (``PYTHONUNBUFFERED``
    honoured), so what a fresh mitmdump has written by the time it listens,
    a forked one has too."""
    (tmp_path / "proxy.yaml").write_text(
        "proxy: {networks: [finney]}\ndata_dir: data\nregistry:\n  endpoints:\n"
        "    - {url: 'http://127.0.0.1:9', provider: p, kind: node-rpc, network: finney}\n"
    )
    seen = []
    for start in (zygote.spawn, spawn):
        port = free_port()
        argv = proxy_argv(BIN / "mitmdump", "proxy.yaml", "http://127.0.0.1:9", port=port)
        child = start("proxy", argv, log=tmp_path / f"proxy-{port}.log", cwd=tmp_path)
        try:
            wait_http(f"http://127.0.0.1:{port}/rpc/", child)
            seen.append("listening at" in child.output())
        finally:
            child.stop()
    assert zygote.started == 1
    assert seen[0] == seen[1], seen
