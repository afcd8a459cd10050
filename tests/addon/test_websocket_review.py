"""Review tests for addon/websocket.py and addon/lean.py (unit level).

Tests whose comment starts "Was:" reproduce a defect an independent review
found (each failed before its fix); the others pin behaviour test_websocket.py
and test_lean.py do not check. Stand-in stages only; every wait is bounded."""

from __future__ import annotations

import asyncio
import json
import logging
import traceback
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from mitmproxy import http
from mitmproxy.addonmanager import AddonManager
from mitmproxy.flow import Flow
from mitmproxy.proxy.layers.http import HttpRequestHook
from mitmproxy.test import taddons, tflow
from mitmproxy.websocket import WebSocketMessage
from wsproto.frame_protocol import Opcode

from addon import lean
from addon import websocket as ws
from addon.respond import WS_KEY
from addon.runtime import RuntimeHolder

# --- helpers -----------------------------------------------------------------------------


class Echo:
    """A stand-in pipeline: answers every call with its body."""

    async def request(self, flow: http.HTTPFlow) -> None:
        flow.response = http.Response.make(200, b'{"echo":' + (flow.request.content or b"0") + b"}")


class Raising:
    def request(self, flow: http.HTTPFlow) -> None:
        raise RuntimeError("stage exploded")


class Gated:
    """Answers once ``gate`` is set (calls stay in flight until then)."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.started = 0

    async def request(self, flow: http.HTTPFlow) -> None:
        self.started += 1
        await self.gate.wait()
        flow.response = http.Response.make(200, b"{}")


def _socket_flow() -> http.HTTPFlow:
    flow = tflow.twebsocketflow(messages=False)
    flow.metadata[WS_KEY] = "finney"
    assert flow.websocket is not None
    flow.websocket.timestamp_end = None  # still open
    return flow


def _client_message(flow: http.HTTPFlow, body: bytes) -> WebSocketMessage:
    assert flow.websocket is not None
    msg = WebSocketMessage(Opcode.TEXT, True, body)
    flow.websocket.messages.append(msg)
    return msg


def _capture_injections(tctx: Any) -> list[tuple[bool, bytes, bool]]:
    injected: list[tuple[bool, bytes, bool]] = []

    def inject(f: Flow, to_client: bool, message: bytes, is_text: bool = True) -> None:
        injected.append((to_client, message, is_text))

    tctx.master.commands.add("inject.websocket", inject)
    return injected


# --- addon/websocket.py ------------------------------------------------------------------


def test_closing_the_sink_ends_the_sockets_it_holds() -> None:
    # Was: addon/websocket.py Sink.close (line 81) only schedules runner.cleanup();
    # aiohttp's shutdown waits (shutdown_timeout, 60 s by default) for the handler,
    # which loops on ``async for msg in ws`` until the *client* closes, so open
    # sockets stay up. ``done`` (hot reload) says "open connections to it end,
    # and their clients reconnect". Expected: the client sees the socket close
    # within a few seconds. Actual: nothing for 90 s and more (measured).
    async def scenario() -> Any:
        sink = ws.Sink()
        port = await sink.start()
        async with aiohttp.ClientSession() as s:
            async with s.ws_connect(f"http://127.0.0.1:{port}/rpc/v1/finney") as conn:
                sink.close()
                try:
                    return await asyncio.wait_for(conn.receive(), 5)
                except TimeoutError:
                    return None

    msg = asyncio.run(scenario())
    assert msg is not None, "the sink was closed but its socket is still open after 5 s"
    closing = (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING)
    assert msg.type in closing


def test_sockets_opened_before_a_hot_reload_are_still_answered() -> None:
    # Was: addon/websocket.py websocket_message (lines 139-142): after a hot
    # reload (``done`` on the old addon, a fresh WebSocketRpc loaded), a socket
    # opened before the reload has no ``_Conn`` in the new instance, so its
    # messages are neither dropped nor answered: they are relayed to the old
    # sink, which swallows them (and, see the test above, never closes). The
    # client waits forever. Expected: the message is dropped (never relayed to
    # the sink) and answered, e.g. by adopting any flow that carries WS_KEY
    # (``self._conns.setdefault(flow.id, _Conn(flow.metadata[WS_KEY]))``) or by
    # closing it. Reproduced end to end in tests/e2e/test_websocket_review_e2e.py.
    holder = RuntimeHolder()
    flow = _socket_flow()

    async def scenario() -> tuple[WebSocketMessage, list[tuple[bool, bytes, bool]]]:
        with taddons.context() as tctx:
            injected = _capture_injections(tctx)
            old = ws.WebSocketRpc(holder, [Echo()])
            old.websocket_start(flow)
            old.done()  # hot reload: the old module's addons are done ...
            new = ws.WebSocketRpc(holder, [Echo()])  # ... and the script's new ones loaded
            msg = _client_message(flow, b'{"id": 1}')
            await asyncio.wait_for(new.websocket_message(flow), 5)
            conn = new._conns.get(flow.id)
            if conn is not None:
                await asyncio.wait_for(asyncio.gather(*conn.tasks), 5)
            return msg, injected

    msg, injected = asyncio.run(scenario())
    assert msg.dropped, "a client message after a reload was relayed to the sink"
    assert len(injected) == 1 and json.loads(injected[0][1]) == {"echo": {"id": 1}}


def test_a_failing_stage_is_answered_logged_and_frees_its_slot(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A stage that raises: the client still gets a JSON-RPC -32603 answer, the
    error is logged once per message, and the in-flight slot comes back (more
    than MAX_IN_FLIGHT failing calls never block the socket)."""
    addon = ws.WebSocketRpc(RuntimeHolder(), [Raising()])
    flow = _socket_flow()
    n = ws.MAX_IN_FLIGHT + 6

    async def scenario() -> list[tuple[bool, bytes, bool]]:
        with taddons.context() as tctx:
            injected = _capture_injections(tctx)
            addon.websocket_start(flow)
            for _ in range(n):
                _client_message(flow, b"{}")
                await asyncio.wait_for(addon.websocket_message(flow), 5)
                await asyncio.sleep(0)
            conn = addon._conns[flow.id]
            await asyncio.wait_for(asyncio.gather(*conn.tasks), 5)
            return injected

    with caplog.at_level(logging.ERROR, logger="chainproxy"):
        injected = asyncio.run(scenario())
    assert len(injected) == n
    for to_client, body, is_text in injected:
        doc = json.loads(body)
        assert to_client and is_text
        assert doc["id"] is None and doc["error"]["code"] == -32603
    assert len([r for r in caplog.records if "no answer" in r.getMessage()]) == n


def test_closing_a_socket_cancels_its_calls_and_injects_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The client goes away with calls in flight: every call task ends
    (cancelled), none injects an answer into the closed flow, nothing is
    logged, and the connection's state is gone."""
    stage = Gated()
    addon = ws.WebSocketRpc(RuntimeHolder(), [stage])
    flow = _socket_flow()

    async def scenario() -> tuple[list[tuple[bool, bytes, bool]], list[asyncio.Task[None]]]:
        with taddons.context() as tctx:
            injected = _capture_injections(tctx)
            addon.websocket_start(flow)
            for _ in range(10):
                _client_message(flow, b"{}")
                await asyncio.wait_for(addon.websocket_message(flow), 5)
            tasks = list(addon._conns[flow.id].tasks)
            await asyncio.sleep(0.05)
            assert stage.started == 10
            assert flow.websocket is not None
            flow.websocket.timestamp_end = 1.0  # the layer saw the close ...
            addon.websocket_end(flow)  # ... and ended the flow
            stage.gate.set()
            await asyncio.wait(tasks, timeout=5)
            return injected, tasks

    with caplog.at_level(logging.WARNING):
        injected, tasks = asyncio.run(scenario())
    assert injected == []
    assert all(t.done() and t.cancelled() for t in tasks)
    assert flow.id not in addon._conns
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


# --- addon/lean.py: the fast dispatch against mitmproxy's own ----------------------------


@pytest.fixture
def manager() -> Iterator[AddonManager]:
    with taddons.context() as tctx:
        yield tctx.master.addons


def _dispatch(
    manager: AddonManager, chain: list[Any], fast: bool, caplog: pytest.LogCaptureFixture
) -> list[tuple[str, list[str]]]:
    """Trigger ``request`` on ``chain``; the error records: (message, traceback frames)."""
    manager.chain = chain
    lean.set_fast_dispatch(manager.master, fast)
    caplog.clear()
    try:
        with caplog.at_level(logging.ERROR):
            manager.master.event_loop.run_until_complete(
                manager.trigger_event(HttpRequestHook(tflow.tflow()))
            )
    finally:
        lean.set_fast_dispatch(manager.master, False)
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
    # Was: addon/lean.py:112-113 skips an addon only when ``func is None``;
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
    # Was: addon/lean.py:108 decides "plain" (no ``addons``) before calling the
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
    # Was: addon/lean.py:144-146 (plain) and 118-123 (sub-addons) re-raise into
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
