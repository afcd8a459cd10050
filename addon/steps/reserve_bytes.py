"""The byte-reservation step: calls still unanswered after the cache (they go
to a node) whose kind is known to answer large (``addon/quota/sizes.py``) take
their expected byte units now, before they are sent; ``charge_bytes`` takes
only what the answer costs beyond that. A cache hit never pays for bytes.
Over the quota: 429 like the quota step (its base units stay taken). Calls
of unknown or small kinds (nearly all) cost nothing here."""

from __future__ import annotations

from collections.abc import Awaitable

from addon.pipeline.context import RpcContext
from addon.pipeline.jsonrpc import Call
from addon.quota.costs import bytes_cost
from addon.quota.local import Decision
from addon.runtime import Runtime
from addon.steps.rate_limit import quota_error


def reserve_bytes(rpc: RpcContext, rt: Runtime) -> Awaitable[None] | None:
    if not rt.sizes or rpc.parsed is None:
        return None
    costs = rt.quotas.costs(rpc.tier)
    if not costs.enabled:
        return None
    items = rpc.parsed.items
    reserved: dict[int, int] = {}
    for i in rpc.pending():
        call = items[i]
        if isinstance(call, Call):
            n = bytes_cost(rt.sizes.expected(call), costs)
            if n:
                reserved[i] = n
    if not reserved:
        return None
    units = sum(reserved.values())
    decision = rt.quotas.decide(rpc.client, units, rpc.tier)
    if isinstance(decision, Decision):
        _apply(rpc, rt, decision, reserved, units)
        return None
    return _apply_later(rpc, rt, decision, reserved, units)


async def _apply_later(
    rpc: RpcContext,
    rt: Runtime,
    pending: Awaitable[Decision],
    reserved: dict[int, int],
    units: int,
) -> None:
    _apply(rpc, rt, await pending, reserved, units)


def _apply(
    rpc: RpcContext, rt: Runtime, decision: Decision, reserved: dict[int, int], units: int
) -> None:
    rpc.rate = decision
    if not decision.allowed:
        call_id = rpc.parsed.items[0].id if rpc.parsed and not rpc.parsed.is_batch else None
        rpc.refuse(429, quota_error(call_id, decision, units, rpc.client))
        return
    rpc.reserved = reserved
    assert rpc.parsed is not None
    costs = rt.quotas.costs(rpc.tier)
    for i, n in reserved.items():
        call = rpc.parsed.items[i]
        if isinstance(call, Call):
            rt.metrics.count_units(call, n, rpc.tier, costs)
