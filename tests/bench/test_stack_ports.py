"""The harness's proxies start on a port taken between its pick and the
bind (another process of the machine got it first: fx47 saw it once in ~3,000
tests): a new port is picked, the test never sees it."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

import bench.stack as bench_stack
from chainproxy.supervisor import StartError
from tests.e2e.harness import Stack, base_config

pytestmark = pytest.mark.e2e


def test_a_port_taken_before_the_bind_is_picked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    busy = taken.getsockname()[1]
    real = bench_stack.free_port
    picks: list[int] = []

    def free_port() -> int:
        picks.append(busy if not picks else real())
        return picks[-1]

    stack = Stack(tmp_path)
    try:
        config: dict[str, Any] = base_config(tmp_path, [])
        stack.write_config(config)
        monkeypatch.setattr(bench_stack, "free_port", free_port)
        stack.start_proxy()
        assert len(picks) == 2 and stack.proxy_url.endswith(f":{picks[1]}")
        # a port given by the caller is the caller's: its failure is said
        with pytest.raises(StartError, match="address already in use"):
            stack.start_chainproxy("again", stack.config_path, "http://127.0.0.1:1", port=busy)
    finally:
        stack.stop()
        taken.close()


def test_a_sidecar_port_taken_before_the_bind_is_picked_again(tmp_path: Path) -> None:
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    busy = taken.getsockname()[1]
    stack = Stack(tmp_path)
    try:
        config: dict[str, Any] = base_config(tmp_path, [])
        config["sidecar"] = bench_stack.sidecar_section(busy)
        stack.write_config(config)
        stack.start_sidecar()
        assert stack.sidecar is not None and stack.sidecar.alive()
        port = stack.config["sidecar"]["port"]
        assert port != busy and stack.sidecar_url == f"http://127.0.0.1:{port}"
        assert config["sidecar"]["port"] == port  # the test's own dict says so too
        assert f"port: {port}" in stack.config_path.read_text()  # type: ignore[union-attr]
        # a config the caller names is the caller's: its failure is said
        with pytest.raises(StartError, match="address already in use"):
            stack.start_sidecar("again", stack.config_path, f"http://127.0.0.1:{port}")
    finally:
        stack.stop()
        taken.close()
