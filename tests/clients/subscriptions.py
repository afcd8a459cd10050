"""Helpers of the subscription tests over chopsticks (test_subscriptions_*.py):
the node-wss side of the routing snapshot, the proxy's subscription-move
counter, the check that a client saw the chain's blocks once each, in order,
and running a client script that asks for blocks while it waits for them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests.clients.chopsticks_stack import NETWORK, ChainStack, routes
from tests.clients.helpers import LineReader

_MOVES = re.compile(
    r'^chainproxy_subscription_moves_total\{network="' + NETWORK + r'"\} ([0-9.e+]+)$', re.M
)


def wait_ws_synced(chain: ChainStack, timeout: float = 30.0) -> None:
    """Both fronts' node-wss endpoints probed healthy at the node's best block
    (the proxy subscribes only on those), then time for the addon to read it."""
    best = chain.node.best()
    ids = {f.ws_endpoint_id for f in chain.fronts if f.alive()}
    deadline = time.monotonic() + timeout
    doc: dict[str, Any] = {}
    while time.monotonic() < deadline:
        doc = routes(chain.stack)
        ups = {u["id"]: u for u in doc.get("ws_upstreams", [])}
        if all(i in ups and ups[i]["healthy"] and ups[i]["best"] == best for i in ids):
            chain.stack.wait_snapshot_applied(NETWORK)  # the addon's view too
            return
        time.sleep(0.2)
    raise AssertionError(f"node-wss endpoints never synced at #{best}: {doc}")


def _metrics(chain: ChainStack) -> str:
    with urllib.request.urlopen(f"{chain.stack.sidecar_url}/metrics", timeout=5) as resp:
        return resp.read().decode()


def subscription_moves(chain: ChainStack) -> float:
    """The proxy's ``chainproxy_subscription_moves_total`` for the network, as the
    sidecar's /metrics has it (0 before the first move)."""
    m = _MOVES.search(_metrics(chain))
    return float(m.group(1)) if m else 0.0


def subscribes_served(chain: ChainStack) -> dict[str, float]:
    """Subscribe calls the proxy served (outcome ok), by method as called."""
    pattern = re.compile(
        r'^chainproxy_requests_total\{method="(\w*[sS]ubscribe\w*)",network="'
        + NETWORK
        + r'",outcome="ok"\} ([0-9.e+]+)$',
        re.M,
    )
    return {m: float(v) for m, v in pattern.findall(_metrics(chain))}


def wait_moves(chain: ChainStack, above: float, timeout: float = 15.0) -> float:
    """The move counter once it is above ``above`` (metrics reach the sidecar
    every ~2 s), or its last value."""
    deadline = time.monotonic() + timeout
    while (moves := subscription_moves(chain)) <= above and time.monotonic() < deadline:
        time.sleep(0.5)
    return moves


def assert_chain(chain: ChainStack, numbers: Iterable[int], hashes: Iterable[str]) -> None:
    """``numbers`` consecutive (each block once, in order) and each ``hashes`` entry
    the node's own hash at that height."""
    numbers, hashes = list(numbers), list(hashes)
    assert numbers == list(range(numbers[0], numbers[0] + len(numbers))), numbers
    for n, h in zip(numbers, hashes, strict=True):
        assert h == chain.node.rpc("chain_getBlockHash", [n]), (n, h)


def run_block_asking(
    argv: list[str], chain: ChainStack, cwd: Path, timeout: float = 180.0
) -> dict[str, dict[str, Any]]:
    """Run a client script that prints "@@ {json}" steps; a step
    ``{"step": "wants", "blocks": n}`` is answered by making n blocks (one at a
    time, straight to chopsticks) and a line on its stdin. The steps by name
    (the last of each), up to ``{"step": "done"}``; the whole run is bounded."""
    proc = subprocess.Popen(
        argv,
        cwd=cwd,  # on-disk caches stay in the test's directory
        env={**os.environ, "HOME": str(cwd), "XDG_CACHE_HOME": str(cwd)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    lines = LineReader(proc.stdout)
    steps: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    try:
        while "done" not in steps:
            if not lines.wait_for("@@ ", max(0.0, deadline - time.monotonic())):
                raise AssertionError(f"{argv[1]}: no step in time or exited:\n{lines.text}")
            step = json.loads(lines.lines[-1].split("@@ ", 1)[1])
            steps[step["step"]] = step
            if step["step"] == "wants":
                for _ in range(step["blocks"]):
                    chain.node.new_blocks(1)
                proc.stdin.write("made\n")
                proc.stdin.flush()
        assert proc.wait(30) == 0, lines.text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    steps["log"] = {"text": lines.text}
    return steps
