"""The direct reads' checks against mitmproxy's own WebSocket layer (the
installed version): they take a socket over only when that layer holds
nothing of a frame or a message and waits for no hook, and every internal
they rely on is where they expect it. The reads themselves run in
tests/e2e/test_websocket_e2e.py and test_ws_fuzz_e2e.py."""

from __future__ import annotations

from typing import Any

from mitmproxy import websocket
from mitmproxy.options import Options
from mitmproxy.proxy import events
from mitmproxy.proxy.context import Context
from mitmproxy.proxy.layers import websocket as mitm_ws
from mitmproxy.test import tflow

from addon.mitm import ws_reads
from tests.addon.mitm.test_frames import frame


def started_layer() -> tuple[mitm_ws.WebsocketLayer, Any]:
    flow = tflow.twebsocketflow()
    flow.websocket = websocket.WebSocketData()
    ctx = Context(flow.client_conn, Options())
    ctx.server = flow.server_conn
    layer = mitm_ws.WebsocketLayer(ctx, flow)
    (start_hook,) = list(layer.handle_event(events.Start()))
    return layer, start_hook


def test_every_internal_relied_on_is_there() -> None:
    assert [name for name, ok in ws_reads.assumptions() if not ok] == []


def test_not_while_the_start_hook_runs_then_yes() -> None:
    layer, hook = started_layer()
    assert not ws_reads.at_frame_boundary([layer])  # paused for websocket_start
    assert list(layer.handle_event(events.HookCompleted(hook))) == []
    assert ws_reads.at_frame_boundary([layer])


def test_not_with_half_a_frame_or_a_fragment_in_hand() -> None:
    layer, hook = started_layer()
    list(layer.handle_event(events.HookCompleted(hook)))
    client = layer.context.client
    whole = frame(0x1, b'{"id":1}' * 40)
    list(layer.handle_event(events.DataReceived(client, whole[:10])))
    assert not ws_reads.at_frame_boundary([layer])  # mid-frame

    layer, hook = started_layer()
    list(layer.handle_event(events.HookCompleted(hook)))
    list(
        layer.handle_event(events.DataReceived(layer.context.client, frame(0x1, b"ab", fin=False)))
    )
    assert not ws_reads.at_frame_boundary([layer])  # a message begun, not ended


def test_not_while_a_message_hook_runs() -> None:
    layer, hook = started_layer()
    list(layer.handle_event(events.HookCompleted(hook)))
    cmds = list(layer.handle_event(events.DataReceived(layer.context.client, frame(0x1, b"x"))))
    assert any(isinstance(c, mitm_ws.WebsocketMessageHook) for c in cmds)
    assert not ws_reads.at_frame_boundary([layer])
    list(layer.handle_event(events.HookCompleted(cmds[-1])))
    assert ws_reads.at_frame_boundary([layer])


def test_a_paused_layer_above_it_counts() -> None:
    layer, hook = started_layer()
    list(layer.handle_event(events.HookCompleted(hook)))

    class Above:
        _paused = object()
        _paused_event_queue: list[Any] = []
        child_layer = layer

    assert not ws_reads.at_frame_boundary([Above(), layer])


def test_the_layer_is_found_down_the_tree() -> None:
    layer, _ = started_layer()

    class Stream:
        child_layer = layer

    class Http:
        streams = {1: Stream()}

    class Handler:
        class Root:
            layer = Http()

        layer = Root()

    path = ws_reads.find_layer(Handler(), layer.flow)
    assert path is not None and path[-1] is layer and len(path) == 4
    assert ws_reads.find_layer(Handler(), tflow.twebsocketflow()) is None


async def test_the_message_limit_in_force_is_read_at_each_read() -> None:
    """A reload that raises the limit (``max_body_bytes``) lets a socket opened
    before it keep reading larger messages directly, where the limit it
    opened with would have handed the socket to mitmproxy for good."""
    client = tflow.tclient_conn()
    handed: list[events.Event] = []

    class Watchdog:
        def register_activity(self) -> None:
            pass

    class Handler:
        timeout_watchdog = Watchdog()

        def __init__(self) -> None:
            self.client = client

        async def server_event(self, event: events.Event) -> None:
            handed.append(event)

    limit = [1000]
    got: list[bytes] = []
    handler = Handler()
    reads = ws_reads.DirectReads(handler, [], None, got.append, lambda: limit[0])
    reads.install()
    reads.ready = True
    await handler.server_event(events.DataReceived(client, frame(0x1, b"a" * 900)))
    limit[0] = 4000  # the reload
    await handler.server_event(events.DataReceived(client, frame(0x1, b"b" * 3000)))
    assert got == [b"a" * 900, b"b" * 3000] and handed == []
    limit[0] = 2000  # lowered: a larger message is mitmproxy's (its limit refuses it)
    await handler.server_event(events.DataReceived(client, frame(0x1, b"c" * 3000)))
    assert len(got) == 2 and len(handed) == 1 and reads.reader.stopped
