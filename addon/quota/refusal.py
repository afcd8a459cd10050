"""The JSON-RPC error of a call over its client's quota: what the quota step
(``addon/steps/rate_limit.py``) answers a call and the WebSocket handshake
(``addon/hooks/websocket.py``) a socket it refuses."""

from __future__ import annotations

from typing import Any

from addon.quota.local import Decision
from addon.rpc.jsonrpc import LIMIT_EXCEEDED, error_obj


def quota_error(call_id: Any, decision: Decision, cost: int, client: str) -> dict[str, Any]:
    """The JSON-RPC error of a call over its client's quota (the SDK's policy
    shape), with what the call costs and the units left, so a client can tell why."""
    return error_obj(
        call_id,
        LIMIT_EXCEEDED,
        # units, not requests: a call may cost more than one (docs/USING.md)
        f"rate limit exceeded: {decision.policy.replace(';w=', ' units per ')}s",
        {
            "policy": decision.policy,
            "reason": (
                f"this call costs {cost} units, more than the whole quota of "
                f"{decision.limit}: split it or ask for less"
                if cost > decision.limit
                else f"client {client} is over its quota"
                + (f" (this call costs {cost} units)" if cost > 1 else "")
            ),
            "retry_after": decision.retry_after,
            "cost": cost,
            "remaining": decision.remaining,
            "limit": decision.limit,  # the whole quota: a cost above it never fits
        },
    )
