"""The one typed error of a read whose state no node holds (pure): what a
client gets instead of a node's raw "State already discarded" message.

* Before sending: a call that reads the state at a known block no upstream
  can hold (every measured horizon, or correction, excludes it) is answered
  at once (``unheld``), no node is asked.
* After the attempts: a call a node answered "State already discarded" for
  (or an unknown block at a known old height) once nothing else may hold that
  block (the nodes that said so are corrected by then), or, at a block whose
  height the proxy does not know, once every node was asked.

The error: JSON-RPC code 4003 (what Substrate answers for a client error,
so code-matching clients see what they saw before), a message that still
says "State already discarded" (the words clients match on), and
``data: {policy: "state_unavailable", reason, block, oldest_block}``:
``oldest_block`` the oldest block any node of the network is known to hold
the state of (null when none is known), ``block`` the one asked (null when
its height is not known).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from addon.chain.horizons import Horizoned, coverage, oldest_block
from addon.rpc.jsonrpc import error_obj

STATE_UNAVAILABLE = 4003
POLICY = "state_unavailable"


def unheld(upstreams: Iterable[Horizoned], n: int, tip: int | None) -> bool:
    """No upstream can hold the state at block ``n``."""
    return all(coverage(u, n, tip) == "lacks" for u in upstreams)


def state_unavailable(
    call_id: Any,
    network: str,
    block: int | None,
    upstreams: Iterable[Horizoned],
    tip: int | None,
) -> dict[str, Any]:
    oldest = oldest_block(upstreams, tip)
    at = f"block {block}" if block is not None else "that block"
    since = f"state from block {oldest} on" if oldest is not None else "no state known"
    reason = f"no node of {network} holds the state at {at} (the oldest: {since})"
    return error_obj(
        call_id,
        STATE_UNAVAILABLE,
        f"State already discarded for {at}: {reason}",
        {"policy": POLICY, "reason": reason, "block": block, "oldest_block": oldest},
    )
