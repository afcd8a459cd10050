"""The fast event dispatch (addon/mitm/internals.py) against mitmproxy's own,
as the oracle: falsy handlers, sub-addons added by a handler, error reports.

Tests whose comment starts "Was:" reproduce a defect an independent review
found (each failed before its fix)."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterator
from typing import Any

import pytest
from mitmproxy.addonmanager import AddonManager
from mitmproxy.proxy.layers.http import HttpRequestHook
from mitmproxy.test import taddons, tflow

from addon.mitm import internals as mitm_internals

# --- the fast dispatch against mitmproxy's own ----------------------------


@pytest.fixture
def manager() -> Iterator[AddonManager]:
    with taddons.context() as tctx:
        yield tctx.master.addons


def _dispatch(
    manager: AddonManager, chain: list[Any], fast: bool, caplog: pytest.LogCaptureFixture
) -> list[tuple[str, list[str]]]:
    """Trigger ``request`` on ``chain``; the error records: (message, traceback frames)."""
    manager.chain = chain
    mitm_internals.set_fast_dispatch(manager.master, fast)
    caplog.clear()
    try:
        with caplog.at_level(logging.ERROR):
            manager.master.event_loop.run_until_complete(
                manager.trigger_event(HttpRequestHook(tflow.tflow()))
            )
    finally:
        mitm_internals.set_fast_dispatch(manager.master, False)
    out = []
    for r in caplog.records:
        if r.levelno < logging.ERROR:
            continue
        frames = [f.name for f in traceback.extract_tb(r.exc_info[2])] if r.exc_info else []
        out.append((r.getMessage(), frames))
    return out


class _FalsyCallable:
    """Callable, but false in a boolean context (``__len__`` is 0)."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def __call__(self, flow: Any) -> None:
        self.log.append("called")

    def __len__(self) -> int:
        return 0


class _FalsyHandlerAddon:
    def __init__(self, log: list[str]) -> None:
        self.request = _FalsyCallable(log)


def test_falsy_callable_handler_is_skipped_as_by_mitmproxy(
    manager: AddonManager, caplog: pytest.LogCaptureFixture
) -> None:
    # Was: addon/mitm/tuning.py:112-113 skips an addon only when ``func is None``;
    # mitmproxy's _iter_hooks tests ``if func:`` and passes over any falsy
    # attribute, so a handler that is callable but falsy (``__len__`` 0,
    # ``__bool__`` False) is never called by mitmproxy yet is called here.
    # Fix: ``if plain and not func: continue``.
    seen: dict[bool, list[str]] = {}
    for fast in (False, True):
        log: list[str] = []
        _dispatch(manager, [_FalsyHandlerAddon(log)], fast, caplog)
        seen[fast] = log
    assert seen[False] == []  # mitmproxy: not a handler
    assert seen[True] == seen[False]


class _Child:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def request(self, flow: Any) -> None:
        self.log.append("child")


class _GrowsSubAddons:
    """Creates its sub-addons in its own handler (lazily, on first use)."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def request(self, flow: Any) -> None:
        self.log.append("parent")
        if not hasattr(self, "addons"):
            self.addons = [_Child(self.log)]


def test_sub_addons_added_by_the_handler_get_the_same_event(
    manager: AddonManager, caplog: pytest.LogCaptureFixture
) -> None:
    # Was: addon/mitm/tuning.py:108 decides "plain" (no ``addons``) before calling the
    # handler. mitmproxy's traverse() is lazy: it yields the addon, runs its
    # handler, and only then looks at ``addons``, so sub-addons the handler
    # just attached receive the very same event. Here they miss it.
    # Fix: after calling a plain addon's handler, if it now has ``addons``,
    # continue with mitmproxy's walk of them (or re-check before ``continue``).
    seen: dict[bool, list[str]] = {}
    for fast in (False, True):
        log: list[str] = []
        _dispatch(manager, [_GrowsSubAddons(log)], fast, caplog)
        seen[fast] = log
    assert seen[False] == ["parent", "child"]
    assert seen[True] == seen[False]


class _Boom:
    def request(self, flow: Any) -> None:
        raise ValueError("boom")


class _BoomParent:
    def __init__(self) -> None:
        self.addons = [_Boom()]


class _StopIter:
    def request(self, flow: Any) -> None:
        raise StopIteration


@pytest.mark.parametrize(
    "make", [_Boom, _BoomParent, _StopIter], ids=["plain", "sub-addon", "StopIteration"]
)
def test_error_report_is_mitmproxys_own(
    manager: AddonManager, caplog: pytest.LogCaptureFixture, make: Any
) -> None:
    # Was: addon/mitm/tuning.py:144-146 (plain) and 118-123 (sub-addons) re-raise into
    # safecall() from _trigger_event. safecall trims the traceback at
    # "invoke_addon", a frame that no longer exists, so every "Addon error"
    # traceback gains two frames (contextlib's safecall and lean's
    # _trigger_event) before the handler's: mitmproxy logs ['request'], this
    # logs ['safecall', '_trigger_event', 'request']. A sync handler raising
    # StopIteration is reported as "Addon error: " instead of mitmproxy's
    # "Addon error: coroutine raised StopIteration" (the handler no longer runs
    # inside a coroutine of its own). The docstring promises the report
    # "exactly as before". Fix: call handlers through a helper named
    # ``invoke_addon`` (so cut_traceback finds it), or cut at "_trigger_event".
    want = _dispatch(manager, [make()], False, caplog)
    got = _dispatch(manager, [make()], True, caplog)
    assert want, "mitmproxy reports the error"
    if make is _StopIter:
        # mitmproxy's own traceback here is of its dispatcher (the RuntimeError
        # is raised where the coroutine is awaited), not of the handler: the
        # message is what must match; ours points at the handler
        assert [m for m, _ in got] == [m for m, _ in want]
        assert got[0][1][-1] == "request"
    else:
        assert got == want
