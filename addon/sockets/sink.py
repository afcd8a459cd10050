"""The WebSocket server mitmproxy relays client sockets to: a tiny aiohttp
server on 127.0.0.1 (a free port) inside the proxy process, which accepts
and never speaks. mitmproxy relays a WebSocket only between two connections;
chainproxy drops client messages before they reach it and injects answers
towards the client. Closing the sink's side of one socket is how a client is
closed with a chosen code (mitmproxy relays the close frame). Pings and pongs
are relayed by mitmproxy too: the sink answers a client's ping, pings a
client (``ping_flow``) and reports its pongs (``on_pong``) for the sockets
chainproxy does not read itself (``addon/sockets/keepalive.py``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from aiohttp import WSCloseCode, WSMsgType, web
from mitmproxy.utils.asyncio_utils import create_task

FLOW_HEADER = "X-Chainproxy-Flow"  # set on the relayed handshake: which flow it is


class Sink:
    """The WebSocket server mitmproxy relays to: accepts, reads, never answers."""

    def __init__(self, on_pong: Callable[[str], None] | None = None) -> None:
        self.on_pong = on_pong  # a client's pong relayed here, by flow id
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._lock = asyncio.Lock()
        self._open: set[web.WebSocketResponse] = set()
        self._by_flow: dict[str, web.WebSocketResponse] = {}  # mitmproxy flow id -> socket

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
        # compress=False: permessage-deflate is never agreed, so a client cannot
        # send a 1 KiB message that inflates to 64 MiB inside mitmproxy before
        # any size check sees it (JSON-RPC clients work the same without it)
        # autoping off: the client's pongs are the keep-alive's, pings answered below
        ws = web.WebSocketResponse(autoping=False, max_msg_size=0, compress=False)
        await ws.prepare(request)
        self._open.add(ws)
        flow_id = request.headers.get(FLOW_HEADER, "")
        if flow_id:
            self._by_flow[flow_id] = ws
        try:
            async for msg in ws:  # no message arrives (client messages are dropped)
                if msg.type is WSMsgType.PING:
                    await ws.pong(msg.data)
                elif msg.type is WSMsgType.PONG:
                    if self.on_pong is not None and flow_id:
                        self.on_pong(flow_id)
                elif msg.type in (WSMsgType.ERROR, WSMsgType.CLOSE):
                    break
        finally:
            self._open.discard(ws)
            if self._by_flow.get(flow_id) is ws:
                del self._by_flow[flow_id]
        return ws

    async def ping_flow(self, flow_id: str, payload: bytes) -> bool:
        """Ping one client: mitmproxy relays the sink's ping to it, and its pong
        back here (``on_pong``). False when its socket is gone."""
        ws = self._by_flow.get(flow_id)
        if ws is None or ws.closed:
            return False
        with contextlib.suppress(Exception):
            await ws.ping(payload)
            return True
        return False

    async def close_flow(self, flow_id: str, code: int, message: str) -> bool:
        """Close one client's socket with ``code``: the sink closes its side and
        mitmproxy relays the close frame to the client (public API only)."""
        ws = self._by_flow.pop(flow_id, None)
        if ws is None or ws.closed:
            return False
        with contextlib.suppress(Exception):
            await ws.close(code=code, message=message.encode()[:120])
        return True

    def close(self) -> None:
        """Synchronous (mitmproxy's hot reload calls ``done`` so): the sockets it
        holds are closed with 1012 "service restart" (their clients reconnect,
        to the new sink) and the server stopped, in a task kept alive here."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        sockets, self._open = list(self._open), set()
        self._by_flow.clear()

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
