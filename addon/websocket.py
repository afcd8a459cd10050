"""JSON-RPC over WebSocket on the same paths (``ws://host/rpc/v1/<network>``),
for the clients that speak nothing else (the bittensor SDK,
async-substrate-interface, substrate-interface with a ``ws://`` URL).

Every message a client sends is one JSON-RPC body (a call or a batch) and goes
through exactly the HTTP pipeline (``addon/pipeline.py``, as a POST to the
same path from the same client): same allowlist,
same per-client quota (each call counts), same cache, upstream choice,
failover and usage records. The answer body is sent back as one text message;
the HTTP status a POST would have had is not, the JSON-RPC error inside says
it all. Subscriptions are refused like any method off the allowlist.

mitmproxy relays a WebSocket only between two connections, so the handshake
goes to a sink of our own: a tiny aiohttp server on 127.0.0.1 (a free port)
inside this process, which accepts and then never speaks. Client
messages are dropped before they reach it; answers are injected towards the
client. Calls on one connection are answered concurrently (clients match
answers by id), at most ``MAX_IN_FLIGHT`` at a time: past that, mitmproxy stops
reading from that client until one is answered.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
from collections.abc import Awaitable
from typing import Any

from aiohttp import WSCloseCode, WSMsgType, web
from mitmproxy import ctx, http
from mitmproxy.utils.asyncio_utils import create_task

from addon import mitm_internals
from addon.context import WS_CALL_KEY, WS_HEADERS_KEY, WS_KEY
from addon.jsonrpc import INTERNAL_ERROR, dumps, error_obj
from addon.paths import RpcRoute, classify
from addon.runtime import RuntimeHolder

log = logging.getLogger("chainproxy")

MAX_IN_FLIGHT = 64  # unanswered calls per connection before we stop reading it
KEEP_MESSAGES = 100  # messages kept on a flow for mitmweb (the rest would grow forever)


def is_upgrade(request: http.Request) -> bool:
    """A well-formed WebSocket handshake (RFC 6455 4.1). Anything less is left
    to the Gate, which answers a GET on an RPC path with the contract's 405."""
    if not (
        request.method == "GET"
        and request.headers.get("upgrade", "").lower() == "websocket"
        and "upgrade" in request.headers.get("connection", "").lower()
        and request.headers.get("sec-websocket-version", "").strip() == "13"
    ):
        return False
    try:
        key = base64.b64decode(request.headers.get("sec-websocket-key", ""), validate=True)
    except (binascii.Error, ValueError):
        return False
    return len(key) == 16


class Sink:
    """The WebSocket server mitmproxy relays to: accepts, reads, never answers."""

    def __init__(self) -> None:
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._lock = asyncio.Lock()
        self._open: set[web.WebSocketResponse] = set()

    async def start(self) -> int:
        async with self._lock:
            if self._runner is None:
                app = web.Application()
                app.router.add_get("/{path:.*}", self._handle)
                runner = web.AppRunner(app, access_log=None, handle_signals=False)
                await runner.setup()
                site = web.TCPSite(runner, "127.0.0.1", 0)
                await site.start()
                self.port = runner.addresses[0][1]
                self._runner = runner
        return self.port

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(autoping=True, max_msg_size=0)
        await ws.prepare(request)
        self._open.add(ws)
        try:
            async for msg in ws:  # nothing arrives (client messages are dropped)
                if msg.type in (WSMsgType.ERROR, WSMsgType.CLOSE):
                    break
        finally:
            self._open.discard(ws)
        return ws

    def close(self) -> None:
        """Synchronous (mitmproxy's hot reload calls ``done`` so): the sockets it
        holds are closed with 1012 "service restart" (their clients reconnect,
        to the new sink) and the server stopped, in a task kept alive here."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        sockets, self._open = list(self._open), set()

        async def shutdown() -> None:
            for ws in sockets:
                with contextlib.suppress(Exception):
                    await ws.close(code=WSCloseCode.SERVICE_RESTART, message=b"proxy reloading")
            await runner.cleanup()

        try:
            # mitmproxy keeps a reference to the task until it ends
            create_task(shutdown(), name="chainproxy: close WebSocket sink", keep_ref=True)
        except RuntimeError:
            return  # no loop left: the process is exiting


class _Conn:
    __slots__ = ("calls", "network", "slots", "tasks")

    def __init__(self, network: str) -> None:
        self.network = network
        self.slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        self.tasks: set[asyncio.Task[None]] = set()
        self.calls = 0


class WebSocketRpc:
    """Before the Gate: takes WebSocket handshakes on RPC paths; answers messages."""

    def __init__(self, holder: RuntimeHolder, pipeline: Any) -> None:
        self.holder = holder
        self.pipeline = pipeline  # the RPC pipeline (addon/pipeline.py), run on each message
        self.sink = Sink()
        self._conns: dict[str, _Conn] = {}

    def request(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        # Synchronous for the plain POSTs that are nearly every request (no
        # coroutine each); a handshake returns one, which mitmproxy awaits.
        rt = self.holder.runtime
        if flow.response or flow.error or not flow.live or rt is None:
            return None
        if not is_upgrade(flow.request):
            return None
        route = classify("POST", flow.request.path, rt.config.proxy.networks)
        if not isinstance(route, RpcRoute):
            return None  # the Gate answers it (404 for an unknown network)
        return self._take_handshake(flow, route)

    async def _take_handshake(self, flow: http.HTTPFlow, route: RpcRoute) -> None:
        port = await self.sink.start()
        flow.metadata[WS_KEY] = route.network
        flow.metadata[WS_HEADERS_KEY] = {
            "X-Forwarded-For": flow.request.headers.get("X-Forwarded-For", ""),
        }
        flow.request.scheme = "http"
        flow.request.host = "127.0.0.1"
        flow.request.port = port  # the path stays: logs and mitmweb show the real one
        flow.comment = f"WebSocket JSON-RPC, {route.network}"

    def websocket_start(self, flow: http.HTTPFlow) -> None:
        network = flow.metadata.get(WS_KEY)
        if network is not None:
            self._conns[flow.id] = _Conn(network)

    async def websocket_message(self, flow: http.HTTPFlow) -> None:
        conn = self._conns.get(flow.id)
        if conn is None:
            network = flow.metadata.get(WS_KEY)
            if network is None:
                return  # not an RPC socket of ours
            # opened before a hot reload (another instance saw its start): adopt it
            conn = self._conns[flow.id] = _Conn(network)
        if flow.websocket is None:
            return
        messages = flow.websocket.messages
        msg = messages[-1]
        if len(messages) > KEEP_MESSAGES:
            del messages[: len(messages) - KEEP_MESSAGES]
        if not msg.from_client:
            if not msg.injected:
                msg.drop()  # the sink never speaks; nothing of it reaches the client
            return
        msg.drop()  # answered by us, never relayed to the sink
        if conn.slots.locked():
            # Back-pressure: the hook waiting pauses only mitmproxy's WebSocket
            # layer; its connection handler would go on reading the socket and
            # queue whatever arrives. Stop reading the client until a slot frees.
            stream = mitm_internals.client_stream(ctx.master, flow)
            transport = stream[0] if stream is not None else None
            if stream is not None:
                mitm_internals.pause_reading(*stream)
            try:
                await conn.slots.acquire()
            finally:
                if transport is not None and not transport.is_closing():
                    transport.resume_reading()
        else:
            await conn.slots.acquire()
        conn.calls += 1
        task = asyncio.create_task(self._answer(flow, conn, msg.content))
        conn.tasks.add(task)
        task.add_done_callback(conn.tasks.discard)

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        conn = self._conns.pop(flow.id, None)
        if conn is None:
            return
        for task in list(conn.tasks):
            task.cancel()
        flow.comment = f"WebSocket JSON-RPC, {conn.network}: {conn.calls} message(s)"

    async def _answer(self, flow: http.HTTPFlow, conn: _Conn, content: bytes) -> None:
        try:
            body = await self.run_pipeline(flow, conn.network, content)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("WebSocket message on %s: no answer", conn.network)
            body = dumps(error_obj(None, INTERNAL_ERROR, "internal proxy error"))
        finally:
            conn.slots.release()
        if flow.websocket is not None and flow.websocket.timestamp_end is None:
            ctx.master.commands.call("inject.websocket", flow, True, body, True)

    async def run_pipeline(self, flow: http.HTTPFlow, network: str, content: bytes) -> bytes:
        """The body a POST of ``content`` from this client would have been answered with."""
        call = http.HTTPFlow(flow.client_conn, flow.server_conn, live=True)
        headers = [(b"Content-Type", b"application/json")]
        xff = flow.metadata.get(WS_HEADERS_KEY, {}).get("X-Forwarded-For")
        if xff:
            headers.append((b"X-Forwarded-For", xff.encode()))
        call.request = http.Request.make(
            "POST",
            f"http://chainproxy/rpc/v1/{network}",
            content,
            http.Headers(headers),
        )
        call.metadata[WS_CALL_KEY] = True
        pending = self.pipeline.request(call)
        if pending is not None:
            await pending
        if call.response is None:
            return dumps(error_obj(None, INTERNAL_ERROR, "internal proxy error"))
        return call.response.raw_content or b""

    def done(self) -> None:
        # synchronous (hot reload): the sink's close is scheduled; open
        # connections to it end, and their clients reconnect
        for conn in self._conns.values():
            for task in list(conn.tasks):
                task.cancel()
        self._conns.clear()
        self.sink.close()
