"""The ordered list of chainproxy addons; ``addon/rpcproxy.py`` only calls this."""

from __future__ import annotations

from addon.cache_stage import Cache
from addon.runtime import RuntimeHolder
from addon.settings import Settings
from addon.sidecar_pass import SidecarPassthrough
from addon.stages import Allowlist, Forwarder, Gate, Guard, RateLimit


def build_addons() -> list[object]:
    holder = RuntimeHolder()
    return [
        Settings(holder),
        Gate(holder),
        Allowlist(holder),
        RateLimit(holder),
        Cache(holder),
        Forwarder(holder),
        SidecarPassthrough(holder),
        Guard(),
    ]
