"""A client socket's life at unit level: sockets opened before a hot reload, a failing
pipeline, a client leaving with calls in flight.

Tests whose comment starts "Was:" reproduce a defect an independent review
found (each failed before its fix). Stand-in pipelines only; every wait is bounded."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import pytest
from mitmproxy import http
from mitmproxy.flow import Flow
from mitmproxy.test import taddons, tflow
from mitmproxy.websocket import WebSocketMessage
from wsproto.frame_protocol import Opcode

from addon.hooks import websocket as ws
from addon.hooks.holder import RuntimeHolder
from addon.pipeline.context import WS_KEY, Origin, Reply, RpcContext, Socket
from addon.sockets.conn import MAX_IN_FLIGHT


def _reply(sock: Socket, origin: Origin, doc: Any) -> RpcContext:
    return RpcContext(sock.network, 0.0, origin, socket=sock, reply=Reply(200, doc, "ok"))


class Echo:
    """A stand-in pipeline: answers every call with its body."""

    async def message(self, content: bytes, sock: Socket, origin: Origin) -> RpcContext:
        return _reply(sock, origin, {"echo": json.loads(content or b"0")})


class Raising:
    async def message(self, content: bytes, sock: Socket, origin: Origin) -> RpcContext:
        raise RuntimeError("stage exploded")


class Gated:
    """Answers once ``gate`` is set (calls stay in flight until then)."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.started = 0

    async def message(self, content: bytes, sock: Socket, origin: Origin) -> RpcContext:
        self.started += 1
        await self.gate.wait()
        return _reply(sock, origin, {})


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


def test_sockets_opened_before_a_hot_reload_are_still_answered() -> None:
    # Was: addon/hooks/websocket.py websocket_message (lines 139-142): after a hot
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
            old = ws.WebSocketRpc(holder, Echo())
            old.websocket_start(flow)
            old.done()  # hot reload: the old module's addons are done ...
            new = ws.WebSocketRpc(holder, Echo())  # ... and the script's new ones loaded
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
    addon = ws.WebSocketRpc(RuntimeHolder(), Raising())
    flow = _socket_flow()
    n = MAX_IN_FLIGHT + 6

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
    addon = ws.WebSocketRpc(RuntimeHolder(), stage)
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
