"""A real ``redis-server`` (Debian package, installed by ``make test``) on a
free loopback port, no persistence, for the tests of the Redis scale-out.
Stop/start keep the port, so a test can kill Redis and bring it back."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chainproxy.supervisor import Child, free_port, spawn
from chainproxy.workers import find_tool, redis_argv

REDIS_SERVER = find_tool("redis-server")
needs_redis = pytest.mark.skipif(
    REDIS_SERVER is None, reason="redis-server is not installed (make test installs it)"
)


class RedisServer:
    def __init__(self, directory: Path, port: int | None = None) -> None:
        assert REDIS_SERVER is not None
        self.directory = directory
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.child: Child | None = None

    def start(self) -> RedisServer:
        argv = redis_argv(str(REDIS_SERVER), self.port, self.directory)
        self.child = spawn("redis", argv, log=self.directory / "redis.log")
        deadline = time.monotonic() + 10
        while not self.ping():
            if not self.child.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start: {self.child.output()[-500:]}")
            time.sleep(0.02)
        return self

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), 0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def command(self, *args: str) -> bytes:
        """One command in the inline protocol (test set-up: FLUSHALL, DEBUG SLEEP …)."""
        with socket.create_connection(("127.0.0.1", self.port), 5) as s:
            s.sendall((" ".join(args) + "\r\n").encode())
            return s.recv(65536)

    def stop(self) -> None:
        if self.child is not None and self.child.alive():
            self.child.stop(grace_s=5)
        self.child = None


@pytest.fixture
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not installed (make test installs it)")
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


__all__ = ["REDIS_SERVER", "RedisServer", "needs_redis", "redis_server"]
