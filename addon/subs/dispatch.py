"""Subscription calls on a client's WebSocket: subscribe, unsubscribe, and the
write subscriptions that stay refused. Everything else in a message goes
through the RPC pipeline as before.

Policy: a subscription opened counts as one call against the client's quota
(notifications do not); at most ``max_subscriptions`` per socket; opens are
usage records of the method as the client called it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from addon.admit import quota_error
from addon.allowlist import refusal_reason
from addon.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    POLICY_REFUSED,
    dumps,
    error_obj,
    loads,
)
from addon.quota import decide
from addon.ratelimit import Decision
from addon.runtime import Runtime
from addon.subs.hub import NoUpstream
from addon.subs.methods import (
    SUBSCRIBE,
    UNSUBSCRIBE,
    WRITE_SUBSCRIPTIONS,
    BadParams,
    canonical_params,
)

RunPlain = Callable[[bytes], Awaitable[bytes]]  # one message through the RPC pipeline
After = Callable[[], None]  # run once the answer has been sent (a greeting)

_HINTS = (b"ubscribe", b"Watch", b"nwatch")


class ClientSocket(Protocol):
    network: str
    client: str
    subscriptions: dict[str, str]  # client subscription id -> method as called

    def send(self, body: bytes) -> None: ...

    def changed(self) -> None: ...


def may_concern_subscriptions(content: bytes) -> bool:
    """A cheap test before any parsing: most messages are plain calls."""
    return any(h in content for h in _HINTS)


def _is_subscription_call(item: Any) -> bool:
    if not isinstance(item, dict):
        return False
    m = item.get("method")
    return isinstance(m, str) and (m in SUBSCRIBE or m in UNSUBSCRIBE or m in WRITE_SUBSCRIPTIONS)


async def answer(
    rt: Runtime, sock: ClientSocket, content: bytes, run_plain: RunPlain
) -> tuple[bytes, list[After]]:
    """The answer to one client message, and what to do once it is sent."""
    try:
        doc = loads(content)
    except (ValueError, RecursionError):
        return await run_plain(content), []
    items = doc if isinstance(doc, list) else [doc]
    if not any(_is_subscription_call(i) for i in items):
        return await run_plain(content), []
    if isinstance(doc, list) and len(doc) > rt.config.proxy.max_batch:
        return await run_plain(content), []  # the pipeline refuses it whole
    answers: list[Any] = []
    afters: list[After] = []
    for item in items:
        if _is_subscription_call(item) and item.get("jsonrpc") == "2.0" and "id" in item:
            one, after = await _one(rt, sock, item)
            if after is not None:
                afters.append(after)
        else:
            one = json.loads(await run_plain(dumps(item)))
        answers.append(one)
    return dumps(answers if isinstance(doc, list) else answers[0]), afters


async def _one(rt: Runtime, sock: ClientSocket, item: dict[str, Any]) -> tuple[Any, After | None]:
    call_id, method, params = item["id"], item["method"], item.get("params", [])
    if method in WRITE_SUBSCRIPTIONS:
        return _policy_refusal(rt, sock, call_id, method, METHOD_NOT_FOUND, None), None
    if method in UNSUBSCRIBE:
        target = params[0] if isinstance(params, list) and params else None
        if isinstance(params, dict):
            target = params.get("subscription")
        owned = isinstance(target, str) and sock.subscriptions.get(target) is not None
        if owned:
            rt.subs.unsubscribe(target, sock)
            del sock.subscriptions[target]
            sock.changed()
        return {"jsonrpc": "2.0", "id": call_id, "result": owned}, None
    ws = rt.config.proxy.websocket
    if not ws.subscriptions:
        return _policy_refusal(rt, sock, call_id, method, METHOD_NOT_FOUND, None), None
    if not rt.subs.serves(sock.network):  # refused before the quota is touched
        return _policy_refusal(
            rt,
            sock,
            call_id,
            method,
            METHOD_NOT_FOUND,
            f"subscriptions are not available on {sock.network}",
            {
                "policy": "subscriptions",
                "reason": f"no node-wss endpoint is configured for {sock.network}",
            },
        ), None
    if len(sock.subscriptions) >= ws.max_subscriptions:
        return _policy_refusal(
            rt,
            sock,
            call_id,
            method,
            POLICY_REFUSED,
            f"too many subscriptions on this socket (limit {ws.max_subscriptions})",
            {
                "policy": "max_subscriptions",
                "reason": "unsubscribe some, or open another socket",
                "limit": ws.max_subscriptions,
            },
        ), None
    decision = decide(rt, sock.client, 1)  # the same quota as calls (Redis when shared)
    if not isinstance(decision, Decision):
        decision = await decision
    if not decision.allowed:
        rt.metrics.count_request(sock.network, method, "rate_limited")
        return quota_error(call_id, decision, 1, sock.client), None
    kind = SUBSCRIBE[method]
    try:
        canon = canonical_params(kind, params)
    except BadParams as e:
        return error_obj(call_id, INVALID_PARAMS, f"invalid params: {e}"), None
    started = time.monotonic()
    try:
        shared, sub = await rt.subs.subscribe(sock.network, kind, canon, sock.send, sock)
    except NoUpstream as e:
        _record(rt, sock, method, None, started, error=True)
        return error_obj(call_id, INTERNAL_ERROR, f"no upstream available: {e}"), None
    sock.subscriptions[sub.sub_id] = method
    sock.changed()
    _record(rt, sock, method, shared.upstream.id if shared.upstream else None, started, False)
    return {"jsonrpc": "2.0", "id": call_id, "result": sub.sub_id}, lambda: shared.greet(sub)


def _policy_refusal(
    rt: Runtime,
    sock: ClientSocket,
    call_id: Any,
    method: str,
    code: int,
    message: str | None,
    data: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A refused subscription call (counted as refused; no quota taken). Without
    a message: the allowlist's refusal, with its reason."""
    rt.metrics.count_request(sock.network, method, "refused")
    if message is None:
        message = f"method not allowed: {method[:64]}"
        data = {"policy": "allowlist", "reason": refusal_reason(method, websocket=True)}
    return error_obj(call_id, code, message, data)


def _record(
    rt: Runtime, sock: ClientSocket, method: str, endpoint: str | None, started: float, error: bool
) -> None:
    rt.metrics.count_request(sock.network, method, "error" if error else "ok")
    rt.usage.record(
        network=sock.network,
        method=method,
        endpoint=endpoint,
        latency_ms=(time.monotonic() - started) * 1000,
        error=error,
        failover=False,
        cache_hit=False,
    )


def release(rt: Runtime, sock: ClientSocket) -> None:
    """A socket closed: all of its subscriptions go."""
    for sub_id in list(sock.subscriptions):
        rt.subs.unsubscribe(sub_id, sock)
    sock.subscriptions.clear()
