"""The record step: the usage records the sidecar's statistics are made of."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from addon.chain.demand import Demand
from addon.pipeline.context import RpcContext
from addon.quota.quotas import Quotas
from addon.reporting.live_metrics import PREWARM, LiveMetrics, is_refusal
from addon.reporting.usage import UsageAggregator
from addon.rpc.jsonrpc import Call


class RecordNeeds(Protocol):
    """What the record step reads of the runtime."""

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def demand(self) -> Demand: ...

    @property
    def metrics(self) -> LiveMetrics: ...

    @property
    def usage(self) -> UsageAggregator: ...


def record(rpc: RpcContext, rt: RecordNeeds) -> None:
    """One usage record per call that was answered from the cache or upstream,
    or that opened a subscription (refusals are not proxied calls: nor is a
    typed refusal given after asking the nodes, ``live_metrics.is_refusal``).
    A call counts as an error when its answer is a JSON-RPC error, the
    proxy's or the upstream's."""
    if rpc.parsed is None:
        return
    latency_ms = rpc.stop(rt.clock()) * 1000
    failover = rpc.failover
    endpoint = rpc.upstream or (rpc.attempts[-1].endpoint if rpc.attempts else None)
    if rt.demand.enabled and (rpc.hits or rpc.coalesced):
        _used_prewarm(rpc, rt)
    units = rpc.item_units or {}
    for i in (*rpc.hits, *rpc.forwarded, *rpc.subscribed):
        item, answer = rpc.parsed.items[i], rpc.answers[i]
        if not isinstance(item, Call) or answer is None:
            continue
        if "error" in answer and is_refusal(answer, asked=True):
            continue  # e.g. every node's budget spent: refused, counted as such
        hit = i in rpc.hits
        sub = i in rpc.subscribed
        rt.usage.record(
            network=rpc.network,
            method=item.method,
            endpoint=None if hit else rpc.subscribed[i] if sub else endpoint,
            latency_ms=latency_ms,
            error="error" in answer,
            failover=failover and not hit and not sub,
            cache_hit=hit,
            units=units.get(i, 0),
        )


def page_charge(
    rpc: RpcContext, quotas: Quotas, usage: UsageAggregator, method: str
) -> Callable[[int], None]:
    """What a long operation's later pages cost, as they are read (after the
    call's own record): taken from the client's quota and added to the
    method's units in the usage statistics (the top methods by units)."""
    client, tier, network = rpc.client, rpc.tier, rpc.network

    def charge(units: int) -> None:
        quotas.charge(client, units, tier)
        usage.add_units(network=network, method=method, units=units)

    return charge


def _used_prewarm(rpc: RpcContext, rt: RecordNeeds) -> None:
    """A client read answered from entries the pre-warm fetched (a hit, or a
    call that joined the pre-warm's own in flight): it was worth it."""
    used = 0
    for i, p in rpc.plans.items():
        if i in rpc.hits or rpc.coalesced:
            used += rt.demand.touch(rpc.network, p.keys)
    if used:
        rt.metrics.count_extra(PREWARM, used, network=rpc.network, outcome="used")
