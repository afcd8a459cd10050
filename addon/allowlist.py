"""Why a method is refused, in words a client developer can act on (pure).

The allowlist itself is a set of exact names from the config
(``common.allowlist_default`` unless the config names its own).
"""

from __future__ import annotations


def refusal_reason(method: str, *, websocket: bool = False) -> str:
    m = method.lower()
    if m.startswith("author_"):
        return "writes are not served: this is a read-only proxy"
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
