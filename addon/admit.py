"""Admission steps: the read-only allowlist and the per-client quota."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from mitmproxy import http

from addon.allowlist import refusal_reason
from addon.context import RpcContext
from addon.jsonrpc import LIMIT_EXCEEDED, METHOD_NOT_FOUND, Call, error_obj
from addon.quota import decide
from addon.ratelimit import Decision
from addon.respond import finish, json_response
from addon.runtime import Runtime


def allowlist(flow: http.HTTPFlow, rpc: RpcContext, rt: Runtime) -> None:
    """Refuse methods that are not on the read-only allowlist (403 / per item)."""
    assert rpc.parsed is not None
    allow = rt.config.proxy.allowlist
    for i, item in enumerate(rpc.parsed.items):
        if isinstance(item, Call) and item.method not in allow:
            rpc.answers[i] = error_obj(
                item.id,
                METHOD_NOT_FOUND,
                f"method not allowed: {item.method[:64]}",
                {
                    "policy": "allowlist",
                    "reason": refusal_reason(item.method, websocket=rpc.websocket),
                },
            )
    if not rpc.parsed.is_batch and rpc.answers[0] is not None:
        finish(flow, json_response(403, rpc.answers[0]), rpc, now=rt.clock(), outcome="refused")


def rate_limit(flow: http.HTTPFlow, rpc: RpcContext, rt: Runtime) -> Awaitable[None] | None:
    """Per-client quota; every call of a batch counts, a batch is taken whole or refused.
    Shared through Redis when configured (then the step awaits one round trip)."""
    cost = len(rpc.pending())
    if cost == 0:
        return None
    decision = decide(rt, rpc.client, cost)
    if isinstance(decision, Decision):
        _apply(flow, rpc, rt, decision, cost)
        return None
    return _apply_later(flow, rpc, rt, decision, cost)


async def _apply_later(
    flow: http.HTTPFlow, rpc: RpcContext, rt: Runtime, pending: Awaitable[Decision], cost: int
) -> None:
    _apply(flow, rpc, rt, await pending, cost)


def _apply(
    flow: http.HTTPFlow, rpc: RpcContext, rt: Runtime, decision: Decision, cost: int
) -> None:
    rpc.rate = decision
    if decision.allowed:
        return
    call_id = rpc.parsed.items[0].id if rpc.parsed and not rpc.parsed.is_batch else None
    body = quota_error(call_id, decision, cost, rpc.client)
    finish(flow, json_response(429, body), rpc, now=rt.clock(), outcome="refused")


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
