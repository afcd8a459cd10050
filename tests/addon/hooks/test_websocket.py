"""addon/hooks/websocket.py, one unit at a time: which handshakes it takes, what it
does with each message (client's dropped and answered, the sink's dropped,
injected answers let through, history trimmed), and the message → POST
hand-over to the pipeline. The pipeline here is a stand-in; the real one over
WebSocket is tested end to end in tests/e2e/test_websocket_e2e.py."""

from __future__ import annotations

import asyncio
import json

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


class EchoStage:
    """A stand-in pipeline: answers with what it was asked, and for whom."""

    def __init__(self) -> None:
        self.seen: list[tuple[bytes, Socket, Origin]] = []

    async def message(self, content: bytes, sock: Socket, origin: Origin) -> RpcContext:
        self.seen.append((content, sock, origin))
        doc = {"echo": json.loads(content or b"null"), "client": sock.client}
        # a status the WebSocket answer must not carry
        reply = Reply(403, doc, "refused")
        return RpcContext(sock.network, 0.0, origin, client=sock.client, socket=sock, reply=reply)


def test_is_upgrade() -> None:
    f = tflow.twebsocketflow()
    assert not ws.is_upgrade(f.request)  # tflow's key "1234" is not 16 bytes of base64
    f.request.headers["sec-websocket-key"] = "dGhlIHNhbXBsZSBub25jZQ=="
    assert ws.is_upgrade(f.request)
    f.request.headers["connection"] = "keep-alive, Upgrade"
    assert ws.is_upgrade(f.request)
    f.request.headers["sec-websocket-version"] = "8"
    assert not ws.is_upgrade(f.request)
    f.request.headers["sec-websocket-version"] = "13"
    f.request.method = "POST"
    assert not ws.is_upgrade(f.request)
    plain = tflow.tflow()
    assert not ws.is_upgrade(plain.request)


def _rpc_flow() -> tuple[WebSocketRpc, http.HTTPFlow, EchoStage]:
    stage = EchoStage()
    addon = ws.WebSocketRpc(RuntimeHolder(), stage)
    flow = tflow.twebsocketflow(messages=False)
    flow.metadata[WS_KEY] = "finney"
    flow.metadata["chainproxy.ws_headers"] = {"client": "203.0.113.9"}
    assert flow.websocket is not None
    flow.websocket.timestamp_end = None  # still open
    return addon, flow, stage


WebSocketRpc = ws.WebSocketRpc


def test_a_message_goes_to_the_pipeline_as_the_handshakes_client() -> None:
    addon, flow, stage = _rpc_flow()
    injected: list[bytes] = []

    async def scenario() -> None:
        with taddons.context() as tctx:

            def inject(f: Flow, to_client: bool, message: bytes, is_text: bool = True) -> None:
                injected.append(message)

            tctx.master.commands.add("inject.websocket", inject)
            addon.websocket_start(flow)
            assert flow.websocket is not None
            flow.websocket.messages.append(WebSocketMessage(Opcode.TEXT, True, b'{"id": 7}'))
            await addon.websocket_message(flow)
            await asyncio.gather(*addon._conns[flow.id].tasks)

    asyncio.run(scenario())
    ((content, sock, origin),) = stage.seen
    assert content == b'{"id": 7}'
    assert sock.network == "finney" and sock.client == "203.0.113.9"  # settled at the handshake
    assert origin.live
    # the body alone: the HTTP status a POST would have had is not sent
    assert [json.loads(m) for m in injected] == [{"echo": {"id": 7}, "client": "203.0.113.9"}]


def test_messages_are_dropped_answered_and_trimmed() -> None:
    addon, flow, _ = _rpc_flow()
    injected: list[tuple[bool, bytes, bool]] = []

    async def scenario() -> None:
        with taddons.context() as tctx:

            def inject(f: Flow, to_client: bool, message: bytes, is_text: bool = True) -> None:
                injected.append((to_client, message, is_text))

            tctx.master.commands.add("inject.websocket", inject)
            addon.websocket_start(flow)
            assert flow.websocket is not None
            msgs = flow.websocket.messages
            # history beyond KEEP_MESSAGES is trimmed
            msgs.extend(
                WebSocketMessage(Opcode.TEXT, False, b"old", injected=True)
                for _ in range(ws.KEEP_MESSAGES + 20)
            )
            client = WebSocketMessage(Opcode.TEXT, True, b'{"id": 1}')
            msgs.append(client)
            await addon.websocket_message(flow)
            assert client.dropped  # never relayed to the sink
            assert len(msgs) == ws.KEEP_MESSAGES
            sink = WebSocketMessage(Opcode.TEXT, False, b"from the sink")
            msgs.append(sink)
            await addon.websocket_message(flow)
            assert sink.dropped
            answer = WebSocketMessage(Opcode.TEXT, False, b"{}", injected=True)
            msgs.append(answer)
            await addon.websocket_message(flow)
            assert not answer.dropped  # our own answers reach the client
            conn = addon._conns[flow.id]
            await asyncio.gather(*conn.tasks)
            addon.websocket_end(flow)
            assert flow.id not in addon._conns
            assert flow.comment.endswith("1 message(s)")

    asyncio.run(scenario())
    ((to_client, message, is_text),) = injected
    assert to_client and is_text
    assert json.loads(message)["echo"] == {"id": 1}


def test_flows_that_are_not_ours_are_left_alone() -> None:
    addon, _, _ = _rpc_flow()
    other = tflow.twebsocketflow()  # no WS_KEY: not a chainproxy RPC socket
    addon.websocket_start(other)
    asyncio.run(addon.websocket_message(other))
    assert other.websocket is not None
    assert not any(m.dropped for m in other.websocket.messages)


@pytest.mark.parametrize("n", [MAX_IN_FLIGHT])
def test_in_flight_calls_are_bounded(n: int) -> None:
    """Past MAX_IN_FLIGHT unanswered calls, the hook waits (mitmproxy stops
    reading that socket) until one is answered."""
    gate = asyncio.Event()

    class Slow:
        async def message(self, content: bytes, sock: Socket, origin: Origin) -> RpcContext:
            await gate.wait()
            reply = Reply(200, {}, "ok")
            return RpcContext(sock.network, 0.0, origin, socket=sock, reply=reply)

    addon = ws.WebSocketRpc(RuntimeHolder(), Slow())
    flow = tflow.twebsocketflow(messages=False)
    flow.metadata[WS_KEY] = "finney"

    async def scenario() -> bool:
        with taddons.context() as tctx:

            def inject(f: Flow, to_client: bool, message: bytes, is_text: bool = True) -> None:
                pass

            tctx.master.commands.add("inject.websocket", inject)
            addon.websocket_start(flow)
            assert flow.websocket is not None
            for _ in range(n):
                flow.websocket.messages.append(WebSocketMessage(Opcode.TEXT, True, b"{}"))
                await addon.websocket_message(flow)
            flow.websocket.messages.append(WebSocketMessage(Opcode.TEXT, True, b"{}"))
            blocked = asyncio.create_task(addon.websocket_message(flow))
            await asyncio.sleep(0.05)
            was_blocked = not blocked.done()
            gate.set()
            await asyncio.wait_for(blocked, 5)
            await asyncio.gather(*addon._conns[flow.id].tasks)
            return was_blocked

    assert asyncio.run(scenario())
