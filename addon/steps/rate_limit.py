"""The quota step: a client's calls are charged to its quota in units, by
what they cost (shared through Redis when configured), a batch taken whole or
refused whole (429). Their bytes are charged after the answer
(``charge_bytes``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from addon.chain.state import ChainState
from addon.pipeline.context import RpcContext
from addon.quota.costs import base_cost
from addon.quota.local import Decision
from addon.quota.quotas import Quotas
from addon.quota.refusal import quota_error
from addon.reporting.live_metrics import LiveMetrics
from addon.rpc.jsonrpc import Call
from addon.rpc.later import Later


class QuotaNeeds(Protocol):
    """What taking units reads of the runtime (``take_units``: this step and
    the byte reservation)."""

    @property
    def quotas(self) -> Quotas: ...


class RateLimitNeeds(Protocol):
    """What the rate_limit step reads of the runtime."""

    @property
    def chain(self) -> ChainState: ...

    @property
    def metrics(self) -> LiveMetrics: ...

    @property
    def quotas(self) -> Quotas: ...


def rate_limit(rpc: RpcContext, rt: RateLimitNeeds) -> Later[Decision] | None:
    """Per-client quota in units (``addon/quota/costs.py``): a batch costs the
    sum of its calls and is taken whole or refused whole. Shared through Redis
    when configured (then the run waits for one round trip)."""
    assert rpc.parsed is not None
    items = rpc.parsed.items
    costs = rt.quotas.costs(rpc.tier)
    chain = rt.chain
    tip = chain.tips.get(rpc.network)
    units: dict[int, int] = {}
    for i in rpc.pending():
        call = items[i]
        if isinstance(call, Call):
            n = base_cost(call, costs, height=chain.blocks.get, tip=tip)
            if n:
                units[i] = n
                rt.metrics.count_units(call, n, rpc.tier, costs)
    return take_units(rpc, rt, units)


def take_units(
    rpc: RpcContext, rt: QuotaNeeds, units: dict[int, int], taken: int = 0, in_place: bool = False
) -> Later[Decision] | None:
    """Take ``units`` (per item) from the call's client, all or nothing, or
    refuse the call (429, the batch whole; ``in_place``: only those items, in
    its answer, for a batch already acted on), giving back the ``taken`` units
    the run took before (a heavy read's reservation refused after its base
    price: a refused call takes nothing); a ``Later`` when the quota is in
    Redis: the decision is applied by its first callback, as the reply is
    read, and the runner goes on from there (``addon/pipeline/runner.py``), so
    no coroutine per step."""
    total = sum(units.values())
    if total == 0:
        return None
    decision = rt.quotas.decide(rpc.client, total, rpc.tier)
    if isinstance(decision, Decision):
        _apply(rpc, rt, decision, units, taken, in_place)
        return None
    decision.then(lambda done: _apply(rpc, rt, done.result(), units, taken, in_place))
    return decision


def _apply(
    rpc: RpcContext,
    rt: QuotaNeeds,
    decision: Decision,
    units: dict[int, int],
    taken: int,
    in_place: bool,
) -> None:
    rpc.rate = decision
    if decision.allowed:
        rpc.charged(units)
        return
    if in_place:
        assert rpc.parsed is not None
        for i, n in units.items():
            call_id = rpc.parsed.items[i].id
            rpc.answers[i] = quota_error(call_id, decision, n, rpc.client)
        return
    cost = sum(units.values()) + taken
    if taken:
        rt.quotas.refund(rpc.client, taken, rpc.tier)
        rpc.units, rpc.item_units = 0, None
        # read again once given back: the window as the client left it (its
        # Reset is its own last spend's, not the base unit just given back)
        fresh = rt.quotas.decide(rpc.client, cost, rpc.tier, take=False)
        if isinstance(fresh, Decision) and not fresh.allowed:
            decision = fresh
        else:  # in Redis (a second round trip is not waited for): what is left
            decision = replace(decision, remaining=min(decision.limit, decision.remaining + taken))
        rpc.rate = decision
    call_id = rpc.parsed.items[0].id if rpc.parsed and not rpc.parsed.is_batch else None
    rpc.refuse(429, quota_error(call_id, decision, cost, rpc.client))
