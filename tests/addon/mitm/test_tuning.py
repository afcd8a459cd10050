"""addon/mitm/tuning.py: the fast event dispatch behaves exactly like mitmproxy's own
``trigger_event`` (same handlers, order, error report, AddonHalt), and lean mode
unloads only built-ins that are not in use. Run against a real mitmproxy
AddonManager (mitmproxy.test.taddons), with mitmproxy's method as the oracle."""

from __future__ import annotations

import logging
import re
import types
from collections.abc import Iterator
from typing import Any

import pytest
from mitmproxy import exceptions
from mitmproxy.addonmanager import AddonManager
from mitmproxy.proxy.layers.http import HttpRequestHook
from mitmproxy.test import taddons, tflow

from addon.mitm import internals as mitm_internals
from addon.mitm import tuning as lean


class Recorder:
    """Addons append (name, event, args) to one shared log."""

    def __init__(self, log: list[tuple[str, str, tuple[Any, ...]]], name: str) -> None:
        self.log, self.name = log, name


def sync_handler(rec: Recorder, *args: Any) -> None:
    rec.log.append((rec.name, "request", args))


class SyncAddon(Recorder):
    def request(self, flow: Any) -> None:
        self.log.append((self.name, "request", (flow,)))


class AsyncAddon(Recorder):
    async def request(self, flow: Any) -> None:
        self.log.append((self.name, "request", (flow,)))


class IdleAddon(Recorder):
    """No handler for the event: skipped by both."""

    def response(self, flow: Any) -> None:  # pragma: no cover - not triggered
        self.log.append((self.name, "response", (flow,)))


class FailingAddon(Recorder):
    def request(self, flow: Any) -> None:
        self.log.append((self.name, "request", (flow,)))
        raise ValueError("boom in " + self.name)


class HaltingAddon(Recorder):
    def request(self, flow: Any) -> None:
        self.log.append((self.name, "request", (flow,)))
        raise exceptions.AddonHalt()


class ModuleNamedLikeHook(Recorder):
    """``from mitmproxy import http as request``-style attribute: not a handler."""

    request = types.ModuleType("request")


class NotCallable(Recorder):
    request = 42  # mitmproxy reports this as an addon error


class Parent(Recorder):
    """An addon with sub-addons (a script, mitmweb's): mitmproxy's own path."""

    def __init__(self, log: list[tuple[str, str, tuple[Any, ...]]], name: str) -> None:
        super().__init__(log, name)
        self.addons = [SyncAddon(log, name + ".child"), AsyncAddon(log, name + ".child2")]

    def request(self, flow: Any) -> None:
        self.log.append((self.name, "request", (flow,)))


class ParentWithFailingChild(Recorder):
    """A failing sub-addon ends its subtree (mitmproxy's invoke_addon), not the chain."""

    def __init__(self, log: list[tuple[str, str, tuple[Any, ...]]], name: str) -> None:
        super().__init__(log, name)
        self.addons = [
            SyncAddon(log, name + ".a"),
            FailingAddon(log, name + ".b"),
            AsyncAddon(log, name + ".c"),
        ]


class ParentWithHaltingChild(Recorder):
    def __init__(self, log: list[tuple[str, str, tuple[Any, ...]]], name: str) -> None:
        super().__init__(log, name)
        self.addons = [HaltingAddon(log, name + ".a"), SyncAddon(log, name + ".b")]


class RaisingGetattr(Recorder):
    def __getattr__(self, item: str) -> Any:
        if item == "request":
            raise RuntimeError("getattr exploded")
        raise AttributeError(item)


CHAINS: dict[str, list[type[Recorder]]] = {
    "plain": [SyncAddon, IdleAddon, AsyncAddon, SyncAddon],
    "failing": [SyncAddon, FailingAddon, AsyncAddon],
    "halting": [SyncAddon, HaltingAddon, AsyncAddon],
    "module attribute": [ModuleNamedLikeHook, SyncAddon],
    "not callable": [NotCallable, SyncAddon],
    "sub-addons": [SyncAddon, Parent, AsyncAddon],
    "raising getattr": [RaisingGetattr, SyncAddon],
    "failing sub-addon": [SyncAddon, ParentWithFailingChild, AsyncAddon],
    "halting sub-addon": [SyncAddon, ParentWithHaltingChild, AsyncAddon],
}


@pytest.fixture
def manager() -> Iterator[AddonManager]:
    with taddons.context() as tctx:
        yield tctx.master.addons


def _run(
    manager: AddonManager,
    kinds: list[type[Recorder]],
    fast: bool,
    caplog: pytest.LogCaptureFixture,
) -> tuple[list[tuple[str, str, int]], list[str]]:
    log: list[tuple[str, str, tuple[Any, ...]]] = []
    manager.chain = [k(log, f"{k.__name__}{i}") for i, k in enumerate(kinds)]
    mitm_internals.set_fast_dispatch(manager.master, fast)
    flow = tflow.tflow()
    caplog.clear()
    with caplog.at_level(logging.ERROR):
        manager.master.event_loop.run_until_complete(manager.trigger_event(HttpRequestHook(flow)))
    mitm_internals.set_fast_dispatch(manager.master, False)
    # which addon saw which event, with the very flow object
    seen = [(name, ev, sum(a is flow for a in args)) for name, ev, args in log]
    # object addresses differ between the two chains
    errors = [
        re.sub(r"0x[0-9a-f]+", "0x…", r.getMessage())
        for r in caplog.records
        if r.levelno >= logging.ERROR
    ]
    return seen, errors


@pytest.mark.parametrize("chain", list(CHAINS))
def test_fast_dispatch_matches_mitmproxy(
    manager: AddonManager, chain: str, caplog: pytest.LogCaptureFixture
) -> None:
    want = _run(manager, CHAINS[chain], False, caplog)
    got = _run(manager, CHAINS[chain], True, caplog)
    assert got == want
    assert want[0], "the chain must call at least one handler"


def test_failing_handler_is_reported_and_the_rest_still_run(
    manager: AddonManager, caplog: pytest.LogCaptureFixture
) -> None:
    seen, errors = _run(manager, CHAINS["failing"], True, caplog)
    assert [s[0] for s in seen] == ["SyncAddon0", "FailingAddon1", "AsyncAddon2"]
    assert errors == ["Addon error: boom in FailingAddon1"]


def test_addon_halt_stops_the_chain(
    manager: AddonManager, caplog: pytest.LogCaptureFixture
) -> None:
    seen, errors = _run(manager, CHAINS["halting"], True, caplog)
    assert [s[0] for s in seen] == ["SyncAddon0", "HaltingAddon1"]
    assert errors == []


def test_options_error_propagates(manager: AddonManager) -> None:
    class Bad:
        def request(self, flow: Any) -> None:
            raise exceptions.OptionsError("bad option")

    manager.chain = [Bad()]
    mitm_internals.set_fast_dispatch(manager.master, True)
    try:
        with pytest.raises(exceptions.OptionsError):
            manager.master.event_loop.run_until_complete(
                manager.trigger_event(HttpRequestHook(tflow.tflow()))
            )
    finally:
        mitm_internals.set_fast_dispatch(manager.master, False)


def test_set_fast_dispatch_installs_and_removes(manager: AddonManager) -> None:
    original = type(manager).trigger_event
    mitm_internals.set_fast_dispatch(manager.master, True)
    assert manager.trigger_event.__func__ is mitm_internals._trigger_event  # type: ignore[attr-defined]
    mitm_internals.set_fast_dispatch(manager.master, True)  # idempotent
    mitm_internals.set_fast_dispatch(manager.master, False)
    assert manager.trigger_event.__func__ is original  # type: ignore[attr-defined]
    mitm_internals.set_fast_dispatch(manager.master, False)  # idempotent


def test_unknown_manager_is_left_alone() -> None:
    master = types.SimpleNamespace(addons=types.SimpleNamespace())
    mitm_internals.set_fast_dispatch(master, True)
    assert not hasattr(master.addons, "trigger_event")


# --- lean mode: which built-ins go ---------------------------------------------------------


@pytest.fixture
def dump_master() -> Iterator[Any]:
    """The addons of a real mitmdump (DumpMaster), as lean mode meets them."""
    import asyncio

    from mitmproxy import options
    from mitmproxy.tools.dump import DumpMaster

    loop = asyncio.new_event_loop()
    try:
        yield DumpMaster(options.Options(), loop=loop, with_termlog=False)
    finally:
        loop.close()


def test_unload_unused_removes_only_unused_builtins(dump_master: Any) -> None:
    dump_master.options.update(flow_detail=0)  # mitmdump -q
    removed = lean.unload_unused(dump_master)
    assert {"anticache", "dumper", "save", "onboarding"} <= set(removed)
    for name in removed:
        assert name in lean.UNLOADABLE
        assert dump_master.addons.get(name) is None
    # what the contract, logging and inspection need stays
    for kept in ("proxyserver", "nextlayer", "tlsconfig", "scriptloader", "core", "block"):
        assert dump_master.addons.get(kept) is not None, kept
    assert lean.unload_unused(dump_master) == []  # idempotent


def test_unload_keeps_builtins_whose_options_are_in_use(dump_master: Any) -> None:
    dump_master.options.update(
        flow_detail=1,  # mitmdump without -q prints flows: dumper stays
        modify_headers=["/~q/X-Test/1"],
        block_list=[":~d example.com:404"],
    )
    removed = lean.unload_unused(dump_master)
    for name in ("dumper", "modifyheaders", "blocklist"):
        assert name not in removed
        assert dump_master.addons.get(name) is not None
    assert "anticache" in removed  # at its default: goes


def test_options_that_act_on_flows_are_named(dump_master: Any, tmp_path: Any) -> None:
    options = dump_master.options
    options.update(flow_detail=1)  # printing flows acts on none
    assert lean.flows_acted_on(options) == []
    saved = str(tmp_path / "x.flows")
    options.update(modify_headers=["/~s/X-Operator/yes"], save_stream_file=saved)
    assert lean.flows_acted_on(options) == ["modify_headers", "save_stream_file"]
    assert "flow_detail" not in lean.FLOW_OPTIONS and "proxyauth" in lean.FLOW_OPTIONS


def test_direct_reads_stay_off_while_an_option_acts_on_flows(tmp_path: Any) -> None:
    """A flow chainproxy answered on a kept-alive connection is taken for
    direct reads, unless a mitmproxy option changes or records every flow
    (those reads make no flows)."""
    from mitmproxy import ctx
    from mitmproxy.addons.blocklist import BlockList
    from mitmproxy.addons.modifyheaders import ModifyHeaders
    from mitmproxy.addons.save import Save
    from mitmproxy.test import tutils

    from addon.hooks.http_direct import HttpDirect
    from addon.mitm.tuning import HTTP_DIRECT_OPTION
    from addon.pipeline.context import META_KEY

    not_draining = type("D", (), {"draining": False})()
    direct = HttpDirect(None, None, None, None, not_draining)  # type: ignore[arg-type]
    flow = tflow.tflow(resp=tutils.tresp())
    flow.metadata[META_KEY] = {}
    with taddons.context(ModifyHeaders(), BlockList(), Save()) as tctx:
        tctx.master.options.add_option(HTTP_DIRECT_OPTION, bool, True, "")
        assert direct._takes(flow)
        for option, value in (
            ("modify_headers", ["/~s/X-Operator/yes"]),
            ("block_list", ["/~q/403"]),
            ("save_stream_file", str(tmp_path / "x.flows")),
        ):
            ctx.options.update(**{option: value})
            assert not direct._takes(flow), option
            ctx.options.update(**{option: ctx.options.default(option)})
        assert direct._takes(flow)
