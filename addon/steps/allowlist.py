"""The allowlist step: methods not on the read-only allowlist are refused (403, or
an error in place in a batch), with a reason a client developer can act on.

The allowlist itself is a set of exact names from the config
(``common.allowlist_default`` unless the config names its own). It governs the
legacy methods; the new spec's families are switched by ``proxy.new_spec``
whatever it says, and ``rpc_methods`` (chainproxy's own answer) is always
served: ``addon/newspec/served.py`` decides both, for ``rpc_methods`` too."""

from __future__ import annotations

from typing import Protocol

from addon.newspec.served import (
    FAMILY,
    RPC_METHODS,
    WRITE_PREFIXES,
    WRITES_REASON,
    new_spec_refusal,
)
from addon.pipeline.context import RpcContext
from addon.rpc.jsonrpc import METHOD_NOT_FOUND, Call, error_obj
from addon.rpc.sub_methods import SUBSCRIBE, UNSUBSCRIBE
from common.config import Config


class AllowlistNeeds(Protocol):
    """What the allowlist step reads of the runtime."""

    @property
    def config(self) -> Config: ...


def allowlist(rpc: RpcContext, rt: AllowlistNeeds) -> None:
    """Refuse methods that are not on the read-only allowlist (403 / per item).
    On a WebSocket the read subscriptions are allowed too (while served) and
    unsubscribing always is."""
    assert rpc.parsed is not None
    proxy = rt.config.proxy
    allow = proxy.allowlist
    for i, item in enumerate(rpc.parsed.items):
        if not isinstance(item, Call):
            continue
        method = item.method
        if method in FAMILY:  # the new spec: its families are switched by proxy.new_spec
            reason = new_spec_refusal(method, proxy.new_spec, websocket=rpc.websocket)
        elif method in allow or method == RPC_METHODS or _socket_call(rpc, rt, item):
            continue
        else:
            reason = refusal_reason(method, websocket=rpc.websocket)
        if reason is not None:
            rpc.answers[i] = error_obj(
                item.id,
                METHOD_NOT_FOUND,
                f"method not allowed: {method[:64]}",
                {"policy": "allowlist", "reason": reason},
            )
    if not rpc.parsed.is_batch and rpc.answers[0] is not None:
        rpc.refuse(403, rpc.answers[0])


def _socket_call(rpc: RpcContext, rt: AllowlistNeeds, call: Call) -> bool:
    if rpc.socket is None:
        return False
    if call.method in UNSUBSCRIBE:
        return True
    return call.method in SUBSCRIBE and rt.config.proxy.websocket.subscriptions


def refusal_reason(method: str, *, websocket: bool = False) -> str:
    m = method.lower()
    if m.startswith(WRITE_PREFIXES):
        return WRITES_REASON
    if "subscribe" in m:
        if websocket:
            return (
                "this subscription is not served: the read subscriptions are new, all and "
                "finalized heads, runtime version and storage"
            )
        return (
            "subscriptions are served over WebSocket only: open ws:// (or wss://) on this "
            "same URL, /rpc/v1/<network>"
        )
    if m.startswith(("offchain_", "sudo", "dev_", "engine_")) or "unsafe" in m:
        return "node administration and unsafe methods are not served"
    return "method is not on the read-only allowlist"
