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
