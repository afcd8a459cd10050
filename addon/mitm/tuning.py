"""Less of mitmproxy's per-request machinery, for a proxy that answers every
request itself: the ``ProxyTuning`` addon and what it switches.

Most of mitmdump's CPU per request goes to handing each event (about 8 per
request: requestheaders, request, responseheaders, response, each followed by
``update``) to every addon in its chain, ~35 of them, through a context manager,
a coroutine and two generators each, whether or not the addon handles that
event: ~80-120 µs per event, ~0.8 ms per request. Two measures:

1. **Fast event dispatch** (``chainproxy_fast_dispatch``, on by default): the
   addon manager's ``trigger_event`` gets a pre-check, on this one instance. An
   addon is passed over only when it has neither a handler attribute for the
   event nor sub-addons (``addon/mitm/internals.py``), i.e. exactly when
   mitmproxy's own code would have found
   nothing to call; every other addon goes through mitmproxy's unchanged path
   (same order, ``safecall`` error handling, ``AddonHalt``). Nothing changes
   but the time: every built-in addon still sees every event it handles.
   ``--set chainproxy_fast_dispatch=false`` restores mitmproxy's own method.
2. **Lean mode** (``chainproxy_lean``, opt-in): also unloads the built-in
   addons that cannot act on chainproxy's flows: those that only rewrite or
   replay traffic mitmproxy forwards itself (chainproxy's addon answers every
   request, so mitmproxy never forwards), console and DNS features, recording.
   Each is unloaded only while the options that turn it on are at their
   defaults, so a deployment that uses one (``-w``, ``--modify-headers``,
   ``--set block_list=…``, ``--proxyauth``…) keeps it. Never unloaded: the
   proxy server, layers, TLS, the script loader, logging,
   ``block_global``/``block_private``, the commands mitmweb uses, error
   checking, and every addon mitmweb adds (flow view, event log…). Turning
   lean mode off again needs a restart (unloaded addons are not re-added).
"""

from __future__ import annotations

import gc
import logging
from typing import Any

from mitmproxy import ctx, exceptions
from mitmproxy.addonmanager import Loader

from addon.mitm import internals as mitm_internals

log = logging.getLogger("chainproxy")

OPTION = "chainproxy_lean"
FAST_DISPATCH_OPTION = "chainproxy_fast_dispatch"
DIRECT_OPTION = "chainproxy_ws_direct"
HTTP_DIRECT_OPTION = "chainproxy_http_direct"

# addon name (mitmproxy's lookup key) -> the options that put it to use; it is
# unloaded only while each of these is at its default.
UNLOADABLE: dict[str, tuple[str, ...]] = {
    # rewrite, replay or answer traffic that mitmproxy itself would forward
    "anticache": ("anticache",),
    "anticomp": ("anticomp",),
    "blocklist": ("block_list",),
    "clientplayback": ("client_replay",),
    "serverplayback": ("server_replay",),
    "mapremote": ("map_remote",),
    "maplocal": ("map_local",),
    "modifybody": ("modify_body",),
    "modifyheaders": ("modify_headers",),
    "stickyauth": ("stickyauth",),
    "stickycookie": ("stickycookie",),
    "upstreamauth": ("upstream_auth",),
    "proxyauth": ("proxyauth",),
    "updatealtsvc": (),
    "disableh2c": (),
    # mitm.it certificate onboarding: not a reverse RPC proxy's business
    "onboarding": (),
    # recording (``-w``, ``--set hardump``) and printing flows (mitmdump without -q)
    "save": ("save_stream_file",),
    "savehar": ("hardump",),
    "dumper": ("flow_detail",),
    # console, browser and DNS features
    "browser": (),
    "commandhistory": (),
    "stripdnshttpsrecords": (),
    "dnsresolver": (),
}


# The options by which mitmproxy's own addons change, hold or record each flow
# (``UNLOADABLE``'s, but printing: ``flow_detail`` only shows flows; and
# ``intercept``, whose addon lean mode keeps). Calls
# chainproxy reads itself are no flows, so while one of these is in use every
# call goes through mitmproxy (direct HTTP and WebSocket reads stay off).
FLOW_OPTIONS = tuple(
    sorted({o for names in UNLOADABLE.values() for o in names} - {"flow_detail"} | {"intercept"})
)


def flows_acted_on(options: Any) -> list[str]:
    """The ``FLOW_OPTIONS`` not at their defaults (the deployment uses them)."""
    return [name for name in FLOW_OPTIONS if not _at_default(options, name)]


def _at_default(options: Any, name: str) -> bool:
    if name not in options:
        return True
    if name == "flow_detail":
        return options.flow_detail == 0  # mitmdump -q
    return options.default(name) == getattr(options, name)


def unload_unused(master: Any) -> list[str]:
    """Unload the built-in addons of ``UNLOADABLE`` that are not in use (idempotent);
    the names of those unloaded."""
    manager = master.addons
    removed = []
    for name, options in UNLOADABLE.items():
        addon = manager.get(name)
        if addon is None or addon not in manager.chain:
            continue
        if not all(_at_default(master.options, o) for o in options):
            continue
        try:
            manager.remove(addon)
        except exceptions.AddonManagerError:
            continue
        removed.append(name)
    if removed:
        log.info(
            "chainproxy lean mode: %d built-in addons unloaded (%s)",
            len(removed),
            ", ".join(removed),
        )
    return removed


class ProxyTuning:
    """The mitmproxy options chainproxy needs and the process-level tuning:
    lazy upstream connections, fast dispatch or lean mode, a frozen heap."""

    def __init__(self) -> None:
        self._running = False

    def load(self, loader: Loader) -> None:
        loader.add_option(
            FAST_DISPATCH_OPTION,
            bool,
            True,
            "Hand each event only to the addons that handle it (same order and error "
            "handling as mitmproxy; see addon/mitm/tuning.py and docs/BENCHMARKS.md).",
        )
        loader.add_option(
            OPTION,
            bool,
            False,
            "Lean mode: also unload the built-in addons that a reverse RPC proxy does not "
            "use (see addon/mitm/tuning.py). Turning it off again needs a restart.",
        )

        loader.add_option(
            DIRECT_OPTION,
            bool,
            True,
            "Read WebSocket calls from plain-text client sockets and write answers and "
            "notifications to them directly (a cache hit costs a third; fast fan-out of "
            "subscriptions); false: both through mitmproxy's WebSocket layer, so that "
            "mitmweb shows them (make inspect sets it).",
        )
        loader.add_option(
            HTTP_DIRECT_OPTION,
            bool,
            True,
            "Read the POSTs that follow a call on a plain-text HTTP/1.1 keep-alive "
            "connection directly and answer them through the same pipeline (a cache hit "
            "costs a fraction of mitmproxy's path); false: every request through "
            "mitmproxy, so that mitmweb shows them (make inspect sets it).",
        )

    def configure(self, updated: set[str]) -> None:
        # Reverse mode would connect to its target on every client connect and drop
        # the client if it is down; the addon answers every request itself.
        if "connection_strategy" in ctx.options and ctx.options.connection_strategy != "lazy":
            ctx.options.update(connection_strategy="lazy")
        # HTTP/2 from clients is not spoken: mitmproxy's HTTP/2 layer has none of
        # the bounds ReadLimits adds to HTTP/1 (head size, read deadline), and RPC
        # clients (and a TLS terminator in front) speak HTTP/1.1 and WebSocket. A
        # client's h2c preface is then an HTTP/1 request mitmproxy refuses (400).
        if "http2" in ctx.options and ctx.options.http2:
            ctx.options.update(http2=False)
        if self._running and updated & {OPTION, FAST_DISPATCH_OPTION}:
            self._apply_dispatch()

    def running(self) -> None:
        self._running = True
        self._apply_dispatch()
        # What exists now (mitmproxy, aiohttp, the config, the runtime) lives as long
        # as the process: take it out of the collector's reach, so a full collection
        # only walks what requests created since. Measured under load: a ~45 ms
        # gen-2 pause every few seconds (in the p99) before, none over 5 ms after.
        gc.collect()
        gc.freeze()

    def _apply_dispatch(self) -> None:
        o = ctx.options
        mitm_internals.set_fast_dispatch(
            ctx.master, o.chainproxy_fast_dispatch or o.chainproxy_lean
        )
        if o.chainproxy_lean:
            unload_unused(ctx.master)
