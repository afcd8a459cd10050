"""The byte-charge step: an answer over ``free_bytes`` costs its client more
units, known only now that it came back (``addon/quota/costs.py``). Taken
whatever is left, so it never fails this call; the client's next calls may be
refused. Only what a node answered for this client counts: a cache hit or an
identical call already in flight cost the nodes nothing more."""

from __future__ import annotations

from addon.pipeline.context import RpcContext
from addon.pipeline.jsonrpc import Call
from addon.quota.costs import answer_bytes, bytes_cost
from addon.runtime import Runtime


def charge_bytes(rpc: RpcContext, rt: Runtime) -> None:
    if rpc.result is None or rpc.result.answers is None or rpc.coalesced:
        return
    costs = rt.quotas.costs(rpc.tier)
    if not costs.enabled or rpc.parsed is None:
        return
    if rpc.result.body_bytes <= costs.free_bytes:
        return  # most answers: no single one can be over when the whole body is not
    items = rpc.parsed.items
    single = len(rpc.forwarded) == 1
    units = 0
    for i in rpc.forwarded:
        answer = rpc.answers[i]
        if answer is None or "result" not in answer:
            continue
        size = rpc.result.body_bytes if single else answer_bytes(answer["result"])
        n = bytes_cost(size, costs)
        if n:
            units += n
            call = items[i]
            if isinstance(call, Call):
                rt.metrics.count_units(call, n, rpc.tier, costs)
    if units:
        rpc.charged = units
        rt.quotas.charge(rpc.client, units, rpc.tier)
