"""The subscribe step: a socket's subscribe calls join (or start) the shared
upstream subscription (``addon/subs/hub.py``) and are answered with the
client's subscription id, the current head following right after the answer
(``rpc.afters``); unsubscribing answers whether the id was the socket's. The
quota, the usage record and the metrics are those of every call."""

from __future__ import annotations

from typing import Any, Protocol

from addon.pipeline.context import RpcContext, Socket
from addon.rpc.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    Call,
    error_obj,
)
from addon.rpc.sub_methods import SUBSCRIBE, UNSUBSCRIBE, BadParams, canonical_params
from addon.steps.subscription_limits import SubscriptionLimitsNeeds, over_limit
from addon.subs.hub import NoUpstream


class SubscribeNeeds(SubscriptionLimitsNeeds, Protocol):
    """What the subscribe step reads of the runtime (the limits, asked again)."""


def subscribe(rpc: RpcContext, rt: SubscribeNeeds) -> Any:
    """Answers the (un)subscribe calls; the rest goes on to the cache and upstream."""
    if rpc.socket is None or rpc.parsed is None:
        return None
    items = rpc.parsed.items
    todo = [
        i
        for i in rpc.pending()
        if isinstance(c := items[i], Call) and (c.method in SUBSCRIBE or c.method in UNSUBSCRIBE)
    ]
    return _answer(rpc, rt, rpc.socket, todo) if todo else None


async def _answer(rpc: RpcContext, rt: SubscribeNeeds, sock: Socket, todo: list[int]) -> None:
    assert rpc.parsed is not None
    for i in todo:  # in order: a batch may subscribe and unsubscribe
        call = rpc.parsed.items[i]
        assert isinstance(call, Call)
        if call.method in UNSUBSCRIBE:
            owned = _unsubscribe(rt, sock, call)
            rpc.answers[i] = {"jsonrpc": "2.0", "id": call.id, "result": owned}
        else:
            rpc.answers[i] = await _subscribe(rpc, rt, sock, i, call)


def _unsubscribe(rt: SubscribeNeeds, sock: Socket, call: Call) -> bool:
    params = call.params
    target = params.get("subscription") if isinstance(params, dict) else None
    if isinstance(params, list) and params:
        target = params[0]
    held = sock.subscriptions.get(target) if isinstance(target, str) else None
    # of this kind only, as a node's RPC server keeps them: another kind's
    # unsubscribe (a follow's id, a storage id to chain_unsubscribeNewHeads) is false
    owned = held is not None and SUBSCRIBE.get(held) is UNSUBSCRIBE[call.method]
    if owned:
        assert isinstance(target, str)
        rt.subs.unsubscribe(target, sock)
        del sock.subscriptions[target]
        sock.changed()
    return owned


async def _subscribe(
    rpc: RpcContext, rt: SubscribeNeeds, sock: Socket, i: int, call: Call
) -> dict[str, Any]:
    kind = SUBSCRIBE[call.method]
    try:
        canon = canonical_params(kind, call.params)
    except BadParams as e:
        return error_obj(call.id, INVALID_PARAMS, f"invalid params: {e}")
    if (refused := over_limit(rt, sock, rpc.tier, call.id, 0)) is not None:
        # another message took the last place while this one waited for the
        # quota: refused after it, and its price given back (a refusal is free)
        units = rpc.item_units.pop(i, 0) if rpc.item_units else 0
        if units:
            rt.quotas.refund(rpc.client, units, rpc.tier)
            rpc.units -= units
        return refused
    try:
        shared, sub = await rt.subs.subscribe(sock.network, kind, canon, sock.send, sock)
    except NoUpstream as e:
        rpc.subscribed[i] = None  # a proxied call that failed: a usage record
        return error_obj(call.id, INTERNAL_ERROR, f"no upstream available: {e}")
    sock.subscriptions[sub.sub_id] = call.method
    sock.changed()
    rpc.subscribed[i] = shared.upstream.id if shared.upstream else None
    if rpc.afters is None:
        rpc.afters = []
    rpc.afters.append(lambda: shared.greet(sub))  # the current head, after the id
    return {"jsonrpc": "2.0", "id": call.id, "result": sub.sub_id}
