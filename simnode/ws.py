"""JSON-RPC over WebSocket: a GET with an upgrade on any RPC path; each text
message is a request or a batch; read subscriptions (``subs.py``) as a node
serves them.

Faults present at the upgrade act on the handshake (hang, close, http_status,
garbage); faults present when a message arrives act on that message's answer.
Each message counts as one request in the counters.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from functools import partial
from typing import Protocol

from aiohttp import WSCloseCode, WSMsgType, web

from .chain import Chain
from .faults import GARBAGE_HTML, FaultState, Respond, faulted_answer
from .replies import drop, status_response
from .rpc import Dispatcher, Parsed, parse
from .subs import Subscriptions, is_subscription_call

MAX_MESSAGE = 15 * 1024 * 1024  # substrate's default max request size


class Served(Protocol):
    """What the WebSocket side needs of its node (``SimNode``)."""

    fault_state: FaultState
    dispatcher: Dispatcher
    chain: Chain
    shutdown_timeout: float

    @property
    def stopping(self) -> bool: ...

    def count(self, parsed: Parsed, request: web.Request, transport: str = "http") -> None: ...

    def count_bytes(self, n: int) -> None: ...


class WebSocketRpc:
    """The WebSocket sessions of one node."""

    def __init__(self, node: Served) -> None:
        self.node = node
        self._sockets: set[web.WebSocketResponse] = set()
        self.subscriptions = 0  # live, over every socket (in /_sim/state)
        self.muted = 0  # notifications the ``mute`` fault kept back (in /_sim/state)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(max_msg_size=MAX_MESSAGE, timeout=self.node.shutdown_timeout)
        if not ws.can_prepare(request).ok:
            raise web.HTTPMethodNotAllowed(request.method, ["POST"])
        rejected = await self._handshake_fault(request)
        if rejected is not None:
            return rejected
        try:
            await ws.prepare(request)
        except ConnectionResetError:  # the client gave up first (a probe timing out on a hang)
            return ws
        self._sockets.add(ws)
        subs = Subscriptions(
            self.node.chain,
            self.node.dispatcher,
            partial(_send, ws),
            tick_s=min(0.1, self.node.chain.config.block_time / 5),
            on_change=self._count,
            muted=self._muted,
        )
        # One task per message: a slow or hung answer does not block the others,
        # as with a real node's concurrent WS request handling.
        tasks: set[asyncio.Task[None]] = set()
        try:
            async for msg in ws:
                if msg.type is WSMsgType.TEXT or msg.type is WSMsgType.BINARY:
                    task = asyncio.ensure_future(self._message(request, ws, msg.data, subs))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                elif msg.type is WSMsgType.ERROR:
                    break
        finally:
            self._sockets.discard(ws)
            subs.close()
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
        return ws

    async def _handshake_fault(self, request: web.Request) -> web.StreamResponse | None:
        """The response replacing the upgrade under a fault, or None to accept it."""
        node, state = self.node, self.node.fault_state
        if not (state.slow or node.stopping):
            return None
        await state.wait_while_hung(lambda: node.stopping)
        f = state.faults
        if node.stopping or f.close:
            return drop(request)
        if f.http_status is not None:
            return status_response(f.http_status)
        if f.garbage:  # e.g. a CDN challenge page instead of the upgrade
            return web.Response(text=GARBAGE_HTML, content_type="text/html")
        return None

    def _count(self, delta: int) -> None:
        self.subscriptions += delta

    def _muted(self) -> bool:
        """Whether a notification is kept back (``mute``); each one counts."""
        if self.node.fault_state.faults.mute:
            self.muted += 1
            return True
        return False

    async def _message(
        self,
        request: web.Request,
        ws: web.WebSocketResponse,
        data: str | bytes,
        subs: Subscriptions,
    ) -> None:
        node = self.node
        parsed = parse(data)
        node.count(parsed, request, "ws")
        if not parsed.batch and parsed.entries and is_subscription_call(parsed.entries[0]):
            answer, sub_id = subs.answer(parsed.entries[0])  # type: ignore[arg-type]
            await _send(ws, json.dumps(answer))
            if sub_id is not None:
                await subs.initial(sub_id)
            return
        if node.fault_state.slow or node.stopping:
            out = await self._faulted(request, ws, partial(node.dispatcher.respond, parsed))
        else:
            out = node.dispatcher.respond(parsed).decode()
        if not out:  # only notifications, or the fault already acted
            return
        node.count_bytes(len(out.encode()) if not out.isascii() else len(out))
        with contextlib.suppress(ConnectionError, RuntimeError):  # the client went away
            await ws.send_str(out)

    async def _faulted(
        self, request: web.Request, ws: web.WebSocketResponse, respond: Respond
    ) -> str:
        a = await faulted_answer(self.node.fault_state, respond, lambda: self.node.stopping)
        if a.kind == "stopping":
            return ""  # shutdown closes the socket
        if a.kind == "drop":
            drop(request)  # cut the TCP connection, no close frame
            return ""
        if a.kind == "status":
            # No HTTP status on an open socket: the node ends the session instead.
            await ws.close(code=WSCloseCode.TRY_AGAIN_LATER, message=str(a.status).encode())
            return ""
        if a.kind == "garbage":
            return GARBAGE_HTML
        body = a.body.decode()
        return body[: len(body) // 2] if a.truncate and len(body) > 1 else body

    async def close_all(self, app: web.Application) -> None:
        """On shutdown, end open sessions with 'going away' instead of leaving them hung."""
        sockets = list(self._sockets)
        if sockets:
            await asyncio.gather(
                *(ws.close(code=WSCloseCode.GOING_AWAY, message=b"shutdown") for ws in sockets),
                return_exceptions=True,
            )


async def _send(ws: web.WebSocketResponse, text: str) -> None:
    with contextlib.suppress(ConnectionError, RuntimeError):  # the client went away
        await ws.send_str(text)
