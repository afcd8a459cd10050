"""Less of mitmproxy's per-request machinery, for a proxy that answers every
request itself.

Most of mitmdump's CPU per request goes to handing each event (about 8 per
request: requestheaders, request, responseheaders, response, each followed by
``update``) to every addon in its chain, ~35 of them, through a context manager,
a coroutine and two generators each, whether or not the addon handles that
event: ~80-120 µs per event, ~0.8 ms per request. Two measures:

1. **Fast event dispatch** (``chainproxy_fast_dispatch``, on by default): the
   addon manager's ``trigger_event`` gets a pre-check, on this one instance. An
   addon is passed over only when it has neither a handler attribute for the
   event nor sub-addons, i.e. exactly when mitmproxy's own code would have found
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

import inspect
import logging
import types
from typing import Any

from mitmproxy import exceptions
from mitmproxy.addonmanager import safecall

log = logging.getLogger("chainproxy")

OPTION = "chainproxy_lean"
FAST_DISPATCH_OPTION = "chainproxy_fast_dispatch"

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

_MARK = "_chainproxy_lean"


def _at_default(options: Any, name: str) -> bool:
    if name not in options:
        return True
    if name == "flow_detail":
        return options.flow_detail == 0  # mitmdump -q
    return options.default(name) == getattr(options, name)


_addon_log = logging.getLogger("mitmproxy.addonmanager")  # where safecall() reports


def _report(exc: BaseException) -> None:
    """mitmproxy's "Addon error" report of a failing handler (``safecall()``): the
    same message, the traceback trimmed to the handler's frames."""
    tb = exc.__traceback__
    t = tb
    while t is not None:  # drop this dispatcher's frames, as safecall() drops invoke_addon's
        if t.tb_frame.f_code.co_name == "_trigger_event" and t.tb_next is not None:
            tb = t.tb_next
        t = t.tb_next
    _addon_log.error(f"Addon error: {exc}", exc_info=(type(exc), exc, tb))


def _as_in_a_coroutine(exc: Exception) -> Exception:
    """A sync handler ran inside mitmproxy's invoke_addon coroutine, where a
    StopIteration becomes RuntimeError (PEP 479); keep the report the same."""
    if isinstance(exc, StopIteration):
        err = RuntimeError("coroutine raised StopIteration")
        err.__cause__ = exc
        err.__traceback__ = exc.__traceback__
        return err
    return exc


async def _trigger_event(self: Any, event: Any) -> None:
    """``AddonManager.trigger_event`` with mitmproxy's semantics, less overhead.

    Same order, same handlers, ``AddonHalt`` and ``OptionsError`` as there, a
    failing handler reported as mitmproxy does ("Addon error: …" on the
    ``mitmproxy.addonmanager`` logger, traceback trimmed to the handler); what
    changes is the cost. mitmproxy enters a generator-based ``safecall()``
    context, starts an ``invoke_addon`` coroutine, walks a generator and rebuilds
    the hook's argument list (``dataclasses.fields``) for every addon and every
    event; here an addon without a handler costs one ``getattr`` and the
    arguments are built once per event. An addon with sub-addons (the script
    loader, which holds chainproxy's own stages; mitmweb's) walks its tree with
    mitmproxy's ``_iter_hooks`` (a failing handler ends its subtree, as in
    ``invoke_addon``); so does a plain addon whose handler just gave it
    sub-addons. Anything unusual (a handler attribute that is not callable, a
    ``getattr`` or truth test that raises) takes mitmproxy's own path."""
    name = event.name
    args: list[Any] | None = None
    for addon in self.chain:
        try:
            plain = not hasattr(addon, "addons")
            func = getattr(addon, name, None) if plain else None
            idle = plain and not func  # mitmproxy's own test: ``if func:``
        except Exception:
            plain, func, idle = False, None, False  # mitmproxy's path meets (and logs) it
        if idle:
            continue
        if plain and not callable(func):
            try:
                with safecall():
                    await self.invoke_addon(addon, event)
            except exceptions.AddonHalt:
                return
            continue
        if args is None:
            args = event.args()
        try:
            if plain:
                res = func(*args)  # type: ignore[misc]
                if res is not None and inspect.isawaitable(res):
                    await res
                if not hasattr(addon, "addons"):
                    continue
                # the handler gave it sub-addons: mitmproxy's traverse() looks
                # only now, so they see this very event
                tree = addon.addons
            else:
                tree = [addon]
            for sub in tree:
                for _, handler in self._iter_hooks(sub, event):
                    res = handler(*args)
                    if res is not None and inspect.isawaitable(res):
                        await res
        except exceptions.AddonHalt:
            return
        except exceptions.OptionsError:
            raise  # safecall() lets these through too
        except Exception as e:
            _report(_as_in_a_coroutine(e))


def set_fast_dispatch(master: Any, on: bool) -> None:
    """Install (or remove) the fast ``trigger_event`` on ``master.addons``."""
    manager = master.addons
    if not (hasattr(manager, "chain") and hasattr(manager, "invoke_addon")):
        return  # not the addon manager this was written against: leave it alone
    installed = getattr(manager, _MARK, False)
    if on and not installed:
        manager.trigger_event = types.MethodType(_trigger_event, manager)
        setattr(manager, _MARK, True)
    elif not on and installed:
        del manager.trigger_event  # mitmproxy's own method again
        setattr(manager, _MARK, False)


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
