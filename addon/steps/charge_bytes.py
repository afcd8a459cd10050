"""The byte-charge step: an answer over ``free_bytes`` costs its client more
units, known only now that it came back (``addon/quota/costs.py``), less what
``reserve_bytes`` already took for it. Taken whatever is left, so it never
fails this call; the client's next calls may be refused. Only what a node
answered for this client counts: a cache hit or an identical call already in
flight cost the nodes nothing more. Each answer's size also teaches
``rt.sizes`` what its kind of call answers."""

from __future__ import annotations

from typing import Protocol

from addon.pipeline.context import RpcContext
from addon.quota.costs import answer_bytes, bytes_cost
from addon.quota.quotas import Quotas
from addon.quota.sizes import AnswerSizes
from addon.reporting.live_metrics import LiveMetrics
from addon.rpc.jsonrpc import Call


class ChargeBytesNeeds(Protocol):
    """What the charge_bytes step reads of the runtime."""

    @property
    def metrics(self) -> LiveMetrics: ...

    @property
    def quotas(self) -> Quotas: ...

    @property
    def sizes(self) -> AnswerSizes: ...


def charge_bytes(rpc: RpcContext, rt: ChargeBytesNeeds) -> None:
    if rpc.result is None or rpc.result.answers is None or rpc.coalesced:
        return
    costs = rt.quotas.costs(rpc.tier)
    if not costs.enabled or rpc.parsed is None:
        return
    items = rpc.parsed.items
    single = len(rpc.forwarded) == 1
    if rpc.result.body_bytes <= costs.free_bytes:
        # most answers: no single one can be over when the whole body is not; a
        # kind that was large is told it is small now
        if rt.sizes and single and isinstance(call := items[rpc.forwarded[0]], Call):
            if rt.sizes.tracked(call):
                rt.sizes.learn(call, rpc.result.body_bytes, costs.free_bytes)
        return
    reserved = rpc.reserved or {}
    units: dict[int, int] = {}
    for i in rpc.forwarded:
        answer = rpc.answers[i]
        call = items[i]
        if answer is None or "result" not in answer or not isinstance(call, Call):
            continue
        size = rpc.result.body_bytes if single else answer_bytes(answer["result"])
        rt.sizes.learn(call, size, costs.free_bytes)
        n = bytes_cost(size, costs) - reserved.get(i, 0)
        if n > 0:
            units[i] = n
            rt.metrics.count_units(call, n, rpc.tier, costs)
    if units:
        rpc.charged(units)
        rt.quotas.charge(rpc.client, sum(units.values()), rpc.tier)
