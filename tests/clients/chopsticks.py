"""One chopsticks node (a real Substrate runtime, offline) and the endpoint
fronts before it, each in a process of its own (see ``chopsticks_stack``)."""

from __future__ import annotations

import json
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chainproxy.supervisor import Child, wait_until
from common.endpoint_id import endpoint_id
from tests.clients.counting import counts_of
from tests.clients.js_deps import CHOPSTICKS_CLI
from tests.e2e.harness import free_port, spawn

CHAIN_NAME = "asset-hub-rococo"  # system_chain of the genesis
GENESIS_PLACEHOLDER = "0x" + "45" * 32  # chopsticks' block-0 "hash"


def rpc(url: str, method: str, params: Any = None, timeout: float = 30.0) -> Any:
    """One JSON-RPC call straight to ``url`` (not through the proxy): the result."""
    doc = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or []}
    req = urllib.request.Request(
        url, json.dumps(doc).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        answer = json.loads(resp.read())
    if "error" in answer:
        raise RuntimeError(f"{method}: {answer['error']}")
    return answer["result"]


@dataclass
class Chopsticks:
    """One chopsticks node (one chain)."""

    proc: Child
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def rpc(self, method: str, params: Any = None, timeout: float = 30.0) -> Any:
        return rpc(self.url, method, params, timeout)

    def wait_ready(self, timeout: float = 600.0) -> None:
        """Until it answers (or exits): its start-up runs the runtime to build
        block #1, which a loaded machine makes slow; the timeout says it hung."""

        def answers() -> bool:
            try:
                self.rpc("chain_getHeader")
            except (OSError, ValueError):
                return False
            return True

        wait_until(answers, self.proc, f"{self.url} not answering", timeout, poll_s=0.25)

    def new_blocks(self, count: int = 1) -> int:
        """Build ``count`` blocks (``dev_newBlock``); the new best height. Building
        runs the runtime: on a loaded machine it takes what it takes (the timeout
        only says chopsticks hung)."""
        self.rpc("dev_newBlock", [{"count": count}], timeout=300.0)
        return self.best()

    def best(self) -> int:
        return int(self.rpc("chain_getHeader")["number"], 16)


def start_chopsticks(name: str, genesis: Path, logdir: Path) -> Chopsticks:
    """Start (not wait for) a chopsticks node on a free port; Manual block mode:
    a block only on ``dev_newBlock``."""
    port = free_port()
    argv = [
        "node",
        str(CHOPSTICKS_CLI),
        "--genesis",
        str(genesis),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--build-block-mode",
        "Manual",
    ]
    return Chopsticks(spawn(name, argv, logdir), port)


@dataclass
class Front:
    """A TCP forwarder in front of a node: one registry endpoint (node-rpc at
    ``url``, node-wss at ``ws_url``). ``stop()`` takes the endpoint down
    (connection refused), ``start()`` brings it back on the same port. With
    ``count`` it counts the JSON-RPC calls passing it (``counts()``)."""

    name: str
    target: int
    logdir: Path
    delay_ms: float = 0.0
    count: bool = False
    port: int = field(default_factory=free_port)
    proc: Child | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def endpoint_id(self) -> str:
        return endpoint_id(self.url)

    @property
    def ws_url(self) -> str:
        """The same port as a node-wss endpoint (chopsticks serves both)."""
        return f"ws://127.0.0.1:{self.port}"

    @property
    def ws_endpoint_id(self) -> str:
        return endpoint_id(self.ws_url)

    def start(self) -> Front:
        argv = [
            sys.executable,
            "-m",
            "tests.clients.forwarder",
            "--listen-port",
            str(self.port),
            "--to",
            f"127.0.0.1:{self.target}",
            "--delay-ms",
            str(self.delay_ms),
            *(["--count"] if self.count else []),
        ]
        proc = self.proc = spawn(self.name, argv, self.logdir)
        # it says so once it listens
        wait_until(lambda: "forwarding" in proc.output(), proc, "not forwarding", 15)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()

    def counts(self) -> dict[str, Any]:
        """Calls that passed so far, by source and method (``tests/clients/counting.py``)."""
        assert self.count, f"{self.name} does not count"
        return counts_of(self.port)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive()
