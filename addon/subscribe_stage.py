"""The subscription steps: what a subscribe or unsubscribe call on a client's
WebSocket does once the allowlist has let it in. The quota, the usage record
and the metrics are the ones every call goes through (``addon/pipeline.py``);
what is here is only what subscriptions add:

* ``subscription_limits`` (before the quota, so a refused one takes nothing):
  subscriptions need a node-wss endpoint on the network, and a socket holds at
  most ``proxy.websocket.max_subscriptions``;
* ``subscribe``: joins (or starts) the shared upstream subscription
  (``addon/subs/hub.py``) and answers with the client's subscription id; the
  current head follows right after the answer (``rpc.afters``). Unsubscribing
  answers whether the id was the socket's.
"""

from __future__ import annotations

from typing import Any

from addon.context import RpcContext, Socket
from addon.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    POLICY_REFUSED,
    Call,
    error_obj,
)
from addon.runtime import Runtime
from addon.subs.hub import NoUpstream
from addon.subs.methods import SUBSCRIBE, UNSUBSCRIBE, BadParams, canonical_params


def subscription_limits(rpc: RpcContext, rt: Runtime) -> None:
    sock = rpc.socket
    if sock is None or rpc.parsed is None:
        return
    items = rpc.parsed.items
    opening = 0
    limit = rt.config.proxy.websocket.max_subscriptions
    for i in rpc.pending():
        call = items[i]
        if not isinstance(call, Call) or call.method not in SUBSCRIBE:
            continue
        if not rt.subs.serves(sock.network):
            rpc.answers[i] = error_obj(
                call.id,
                METHOD_NOT_FOUND,
                f"subscriptions are not available on {sock.network}",
                {
                    "policy": "subscriptions",
                    "reason": f"no node-wss endpoint is configured for {sock.network}",
                },
            )
        elif len(sock.subscriptions) + opening >= limit:
            rpc.answers[i] = error_obj(
                call.id,
                POLICY_REFUSED,
                f"too many subscriptions on this socket (limit {limit})",
                {
                    "policy": "max_subscriptions",
                    "reason": "unsubscribe some, or open another socket",
                    "limit": limit,
                },
            )
        else:
            opening += 1
    if not rpc.parsed.is_batch and rpc.answers[0] is not None:
        rpc.refuse(403, rpc.answers[0])


def subscribe(rpc: RpcContext, rt: Runtime) -> Any:
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


async def _answer(rpc: RpcContext, rt: Runtime, sock: Socket, todo: list[int]) -> None:
    assert rpc.parsed is not None
    for i in todo:  # in order: a batch may subscribe and unsubscribe
        call = rpc.parsed.items[i]
        assert isinstance(call, Call)
        if call.method in UNSUBSCRIBE:
            owned = _unsubscribe(rt, sock, call)
            rpc.answers[i] = {"jsonrpc": "2.0", "id": call.id, "result": owned}
        else:
            rpc.answers[i] = await _subscribe(rpc, rt, sock, i, call)


def _unsubscribe(rt: Runtime, sock: Socket, call: Call) -> bool:
    params = call.params
    target = params.get("subscription") if isinstance(params, dict) else None
    if isinstance(params, list) and params:
        target = params[0]
    owned = isinstance(target, str) and sock.subscriptions.get(target) is not None
    if owned:
        assert isinstance(target, str)
        rt.subs.unsubscribe(target, sock)
        del sock.subscriptions[target]
        sock.changed()
    return owned


async def _subscribe(
    rpc: RpcContext, rt: Runtime, sock: Socket, i: int, call: Call
) -> dict[str, Any]:
    kind = SUBSCRIBE[call.method]
    try:
        canon = canonical_params(kind, call.params)
    except BadParams as e:
        return error_obj(call.id, INVALID_PARAMS, f"invalid params: {e}")
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


def release(rt: Runtime, sock: Socket) -> None:
    """A socket closed: all of its subscriptions go."""
    for sub_id in list(sock.subscriptions):
        rt.subs.unsubscribe(sub_id, sock)
    sock.subscriptions.clear()
