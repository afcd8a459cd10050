"""The ordered list of chainproxy addons; ``addon/rpcproxy.py`` only calls this."""

from __future__ import annotations

from addon.cache_stage import Cache
from addon.runtime import RuntimeHolder
from addon.settings import Settings
from addon.sidecar_pass import SidecarPassthrough
from addon.stages import Allowlist, Forwarder, Gate, Guard, RateLimit
from addon.websocket import WebSocketRpc


def build_addons() -> list[object]:
    holder = RuntimeHolder()
    rpc_stages = [
        Gate(holder),
        Allowlist(holder),
        RateLimit(holder),
        Cache(holder),
        Forwarder(holder),
    ]
    return [
        Settings(holder),
        # first: takes WebSocket handshakes, then runs each message through rpc_stages
        WebSocketRpc(holder, rpc_stages),
        *rpc_stages,
        SidecarPassthrough(holder),
        Guard(),
    ]
