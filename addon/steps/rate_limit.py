"""The quota step: a client's calls are charged to its quota (shared through
Redis when configured), a batch taken whole or refused whole (429)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from addon.pipeline.context import RpcContext
from addon.pipeline.jsonrpc import LIMIT_EXCEEDED, Call, Item, error_obj
from addon.quota.choose import decide
from addon.quota.local import Decision
from addon.runtime import Runtime
from addon.subs.methods import UNSUBSCRIBE


def cost(item: Item) -> int:
    """Quota units one call takes: 1, and nothing to unsubscribe (giving back
    what a subscribe took would only teach clients to churn)."""
    return 0 if isinstance(item, Call) and item.method in UNSUBSCRIBE else 1


def rate_limit(rpc: RpcContext, rt: Runtime) -> Awaitable[None] | None:
    """Per-client quota; every call of a batch counts (subscribe included), a
    batch is taken whole or refused whole. Shared through Redis when configured
    (then the step awaits one round trip)."""
    assert rpc.parsed is not None
    pending = rpc.pending()
    units = len(pending)  # a POST: every call costs 1 (unsubscribing is a socket's)
    if rpc.socket is not None:
        items = rpc.parsed.items
        units = sum(cost(items[i]) for i in pending)
    if units == 0:
        return None
    decision = decide(rt, rpc.client, units)
    if isinstance(decision, Decision):
        _apply(rpc, decision, units)
        return None
    return _apply_later(rpc, decision, units)


async def _apply_later(rpc: RpcContext, pending: Awaitable[Decision], units: int) -> None:
    _apply(rpc, await pending, units)


def _apply(rpc: RpcContext, decision: Decision, units: int) -> None:
    rpc.rate = decision
    if decision.allowed:
        return
    call_id = rpc.parsed.items[0].id if rpc.parsed and not rpc.parsed.is_batch else None
    rpc.refuse(429, quota_error(call_id, decision, units, rpc.client))


def quota_error(call_id: Any, decision: Decision, cost: int, client: str) -> dict[str, Any]:
    """The JSON-RPC error of a call over its client's quota (the SDK's policy shape)."""
    return error_obj(
        call_id,
        LIMIT_EXCEEDED,
        f"rate limit exceeded: {decision.policy.replace(';w=', ' requests per ')}s",
        {
            "policy": decision.policy,
            "reason": (
                f"this batch has {cost} calls, more than the whole quota of "
                f"{decision.limit}: split it"
                if cost > decision.limit
                else f"client {client} is over its quota"
                + (f" (this batch needs {cost})" if cost > 1 else "")
            ),
            "retry_after": decision.retry_after,
        },
    )
