"""The byte-reservation step: calls still unanswered after the cache (they go
to a node) whose kind is known to answer large (``addon/quota/sizes.py``) take
their expected byte units now, before they are sent; ``charge_bytes`` takes
only what the answer costs beyond that. A cache hit never pays for bytes.
Over the quota: 429 like the quota step, and the base units the quota step
took are given back (a refused call takes nothing; ``data.cost`` is both),
or, in a batch that already made a subscription or answered a new-spec
read, only its heavy reads are refused, each in its place.
Calls of unknown or small kinds (nearly all) cost nothing here."""

from __future__ import annotations

from addon.pipeline.context import RpcContext
from addon.quota.costs import bytes_cost
from addon.quota.local import Decision
from addon.rpc.jsonrpc import Call
from addon.rpc.later import Later
from addon.steps.charge_bytes import ChargeBytesNeeds
from addon.steps.rate_limit import take_units

# the same as the byte charge reads: what a call costs in bytes, and the quota to take it from
ReserveBytesNeeds = ChargeBytesNeeds


def heavy_units(rpc: RpcContext, rt: ReserveBytesNeeds) -> dict[int, int]:
    """The pending calls of a kind known to answer large (heavy reads), and
    the byte units each is expected to take; empty when none (or unit costs
    are off). The pre-warm marks its heavy reads with it too, charging nobody."""
    if not rt.sizes or rpc.parsed is None:
        return {}
    costs = rt.quotas.costs(rpc.tier)
    if not costs.enabled:
        return {}
    items = rpc.parsed.items
    heavy: dict[int, int] = {}
    for i in rpc.pending():
        call = items[i]
        if isinstance(call, Call):
            n = bytes_cost(rt.sizes.expected(call), costs)
            if n:
                heavy[i] = n
    return heavy


def reserve_bytes(rpc: RpcContext, rt: ReserveBytesNeeds) -> Later[Decision] | None:
    reserved = heavy_units(rpc, rt)
    if not reserved:
        return None
    rpc.reserved = reserved  # (a refused call ends here: nothing reads it then)
    # refused, the price the quota step took is given back; but where a call
    # of the batch was acted on already (a subscription made, a new-spec read
    # answered, a follow begun), only the heavy reads are refused, in place:
    # the rest is answered (a subscription's id is never kept from its client)
    if rpc.subscribed or rpc.afters:
        pending = take_units(rpc, rt, reserved, in_place=True)
    else:
        pending = take_units(rpc, rt, reserved, taken=rpc.units)
    if pending is None:
        _count(rpc, rt, reserved, rpc.rate)
    else:
        pending.then(lambda done: _count(rpc, rt, reserved, _decided(done)))
    return pending


def _decided(done: Later[Decision]) -> Decision | None:
    try:
        return done.result()
    except Exception:  # the quota's own failure: the runner answers it
        return None


def _count(
    rpc: RpcContext, rt: ReserveBytesNeeds, reserved: dict[int, int], decision: Decision | None
) -> None:
    """The units reserved, in ``chainproxy_quota_units_total``, once taken: a
    read refused for them took nothing (only its base units, the quota step's)."""
    if decision is None or not decision.allowed:
        return
    assert rpc.parsed is not None
    costs = rt.quotas.costs(rpc.tier)
    for i, n in reserved.items():
        call = rpc.parsed.items[i]
        assert isinstance(call, Call)  # (heavy_units takes calls only)
        rt.metrics.count_units(call, n, rpc.tier, costs)
