"""Helpers of the subscription tests over chopsticks (test_subscriptions_*.py):
the node-wss side of the routing snapshot, the proxy's subscription-move
counter, and the check that a client saw the chain's blocks once each, in order."""

from __future__ import annotations

import re
import time
import urllib.request
from collections.abc import Iterable
from typing import Any

from tests.clients.chopsticks_stack import NETWORK, ChainStack, routes

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
            time.sleep(1.5)  # the addon refreshes its snapshot every second
            return
        time.sleep(0.2)
    raise AssertionError(f"node-wss endpoints never synced at #{best}: {doc}")


def subscription_moves(chain: ChainStack) -> float:
    """The proxy's ``chainproxy_subscription_moves_total`` for the network, as the
    sidecar's /metrics has it (0 before the first move)."""
    with urllib.request.urlopen(f"{chain.stack.sidecar_url}/metrics", timeout=5) as resp:
        m = _MOVES.search(resp.read().decode())
    return float(m.group(1)) if m else 0.0


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
