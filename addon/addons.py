"""The mitmproxy addons chainproxy is made of, in order: what
``addon/rpcproxy.py`` (the ``-s`` script) hands to mitmproxy."""

from __future__ import annotations

import logging
from typing import Any

from mitmproxy import ctx, http

from addon.hooks.drain import Drain
from addon.hooks.holder import RuntimeHolder
from addon.hooks.http_direct import HttpDirect
from addon.hooks.idle import IdleConnections
from addon.hooks.keepers import CacheKeeper, SizesKeeper
from addon.hooks.passthrough import SidecarPassthrough
from addon.hooks.pipeline import RpcPipeline
from addon.hooks.prewarm import Prewarmer
from addon.hooks.read_limits import ReadLimitsAddon
from addon.hooks.session import HttpSession
from addon.hooks.settings import Settings
from addon.hooks.shipping import ShipperAddon
from addon.hooks.snapshot import SnapshotRefresher
from addon.hooks.websocket import WebSocketRpc
from addon.mitm.limits import ReadLimits
from addon.mitm.responses import json_response
from addon.mitm.tuning import ProxyTuning
from addon.pipeline.context import WS_KEY
from addon.rpc.jsonrpc import INTERNAL_ERROR, error_obj

log = logging.getLogger("chainproxy")


class Guard:
    """Last in the chain: a flow nobody answered (a bug raised in a hook) gets a
    JSON 500 here, so mitmproxy never falls back to forwarding it itself (to
    its reverse target, the sidecar: raw, path unchecked).

    Two of them run. One is last of the script's own addons. mitmproxy walks a
    script's addons as one unit, and an exception in one of them ends the walk
    for that event, so the second one (``install_outer_guard``) is an addon of
    mitmproxy's own chain, after the script: it still runs then."""

    def __init__(self, name: str = "chainproxy_guard") -> None:
        self.name = name  # mitmproxy's addon name: unique in its lookup

    def request(self, flow: http.HTTPFlow) -> None:
        if flow.response or flow.error or not flow.live or WS_KEY in flow.metadata:
            return
        log.error(
            "no stage answered %s %s: see the addon error above",
            flow.request.method,
            flow.request.path[:200],
        )
        flow.response = json_response(500, error_obj(None, INTERNAL_ERROR, "internal proxy error"))


OUTER_GUARD = "chainproxy_outer_guard"


def install_outer_guard() -> None:
    """The second ``Guard``, added once to mitmproxy's chain (a hot reload of the
    script finds it there already)."""
    try:
        addons = ctx.master.addons
    except AttributeError:  # no running mitmproxy (the addons built in a test)
        return
    if addons.get(OUTER_GUARD) is None:
        addons.add(Guard(OUTER_GUARD))


def build_addons() -> list[Any]:
    problem = repeated_options()
    if problem is not None:
        # an error log at start-up makes mitmdump exit 1 with this one line
        # (an exception here would be logged as the script's, with a traceback)
        log.error("%s", problem)
        return []
    install_outer_guard()
    holder = RuntimeHolder()
    limits = ReadLimits()
    rpc = RpcPipeline(holder)
    sockets = WebSocketRpc(holder, rpc, limits)
    idle = IdleConnections(holder)
    shipper = ShipperAddon(holder)
    drain = Drain(holder, sockets, before_stop=shipper.before_stop)
    return [
        Settings(holder, limits, Prewarmer(holder)),  # the config → the runtime every part reads
        ReadLimitsAddon(limits),  # mitmproxy's missing read limits: patched in on load, out on done
        idle,  # a connection with no request for read_timeout_s: closed
        ProxyTuning(),  # mitmproxy options, fast dispatch / lean mode
        HttpSession(holder),  # the pooled HTTP session (upstreams and sidecar)
        SnapshotRefresher(holder),  # background: routing snapshot from the sidecar
        shipper,  # background: usage batches to the sidecar
        SizesKeeper(holder),  # background: the learned answer sizes to data_dir
        CacheKeeper(holder),  # at a stop: the edge cache's pending writes to disk
        # before the pipeline: takes WebSocket handshakes, runs each message through it
        sockets,
        drain,  # SIGTERM: answer what is in flight, then exit
        rpc,
        SidecarPassthrough(holder),  # every non-RPC path
        # after the drain's response hook: reads a kept-alive client's next POSTs itself
        HttpDirect(holder, rpc.runner, limits, idle, drain),
        Guard(),
    ]


def repeated_options() -> str | None:
    """An option of chainproxy's given twice (``--set chainproxy_http_direct=false``
    twice), as the one line that stops the start. mitmproxy keeps options of a
    script not loaded yet aside, and when one of them has two values it applies
    none of them and says nothing: the proxy would start with no config and pass
    every call to the sidecar."""
    try:
        deferred = ctx.options.deferred
    except AttributeError:  # no running mitmproxy (the addons built in a test)
        return None
    repeated = {
        name: values
        for name, value in deferred.items()
        if name.startswith("chainproxy_")
        and isinstance(values := getattr(value, "val", None), list)
        and len(values) > 1
    }
    if not repeated:
        return None
    given = "; ".join(f"{k} = {', '.join(map(str, v))}" for k, v in sorted(repeated.items()))
    return f"chainproxy: an option given more than once ({given}): give each once"
