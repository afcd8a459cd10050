"""The port-owner check behind every wait for a child (chainproxy/port_owner.py):
a port someone else took between free_port() and the child's bind does not
count as the child being ready."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from chainproxy.port_owner import listening_inodes, session_listens
from chainproxy.supervisor import StartError, free_port, spawn, wait_http, wait_port

pytestmark = pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc")

SERVE = (
    "import http.server, sys; "
    "http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), "
    "http.server.BaseHTTPRequestHandler).serve_forever()"
)
SLEEP = "import time; time.sleep(30)"


def test_a_port_held_by_another_process_is_not_the_childs(tmp_path: Path) -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        assert listening_inodes(port)  # the table sees the listener
        child = spawn("idle", [sys.executable, "-c", SLEEP], log=tmp_path / "idle.log")
        try:
            assert not session_listens(child.pid, port)
            with pytest.raises(StartError, match="not open"):
                wait_port(port, child, timeout_s=0.5)  # it answers, but not from the child
        finally:
            child.stop(grace_s=1)


def test_the_childs_own_listener_counts(tmp_path: Path) -> None:
    port = free_port()
    child = spawn("web", [sys.executable, "-c", SERVE, str(port)], log=tmp_path / "web.log")
    try:
        wait_http(f"http://127.0.0.1:{port}/", child, timeout_s=20)
        assert session_listens(child.pid, port)
        assert not session_listens(child.pid + 10_000_000, port)  # no such session
    finally:
        child.stop(grace_s=1)


def test_nobody_listening_is_not_listening() -> None:
    port = free_port()
    assert listening_inodes(port) == set()
    assert not session_listens(1, port)


def test_without_proc_it_cannot_tell_and_says_yes(tmp_path: Path) -> None:
    assert listening_inodes(80, proc=tmp_path) is None
    assert session_listens(1, 80, proc=tmp_path)
