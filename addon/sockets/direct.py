"""A WebSocket client's messages read by chainproxy itself (``addon/mitm/ws_reads.py``)
and answered without a task where none is needed: a cache hit or a refusal is
answered before the next message is read; a call that goes upstream becomes
one task, and at ``MAX_IN_FLIGHT`` of them the socket is read no further until
one ends (as ``WebSocketRpc.websocket_message`` pauses mitmproxy's reads).

Each message takes exactly the steps a message relayed by mitmproxy takes
(``RpcPipeline``), so the answers are the same; only mitmproxy's per-message
machinery is skipped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from addon.mitm import ws_reads
from addon.mitm.limits import Limits
from addon.pipeline.context import RpcContext
from addon.pipeline.reply import message_body
from addon.rpc.jsonrpc import INTERNAL_ERROR, dumps, error_obj
from addon.sockets.conn import MAX_IN_FLIGHT, ClientConn

log = logging.getLogger("chainproxy")

DEFAULT_MAX_MESSAGE = 16 << 20  # with no message limit set: larger frames are mitmproxy's


def reply(conn: ClientConn, rpc: RpcContext) -> None:
    """A finished run's answer to its socket, then what follows it (e.g. the
    current head right after a subscription's id)."""
    if conn.open:
        conn.send(message_body(rpc))  # the way notifications go: they never overtake it
        for after in rpc.afters or ():
            after()


def internal_error(conn: ClientConn, network: str) -> None:
    log.exception("WebSocket message on %s: no answer", network)
    if conn.open:
        conn.send(dumps(error_obj(None, INTERNAL_ERROR, "internal proxy error")))


class DirectAnswers:
    def __init__(self, pipeline: Any, limits: Limits) -> None:
        self.pipeline = pipeline  # addon/hooks/pipeline.py's RpcPipeline
        self.limits = limits  # the read limits in force (each config sets them)

    def attach(self, conn: ClientConn, master: Any) -> None:
        """Read ``conn``'s socket directly from now on, where that is safe
        (a socket whose answers are written directly: plain text, a known
        mitmproxy, ``chainproxy_ws_direct`` on)."""
        if conn.reads is None and conn.direct:
            conn.reads = ws_reads.take(
                master,
                conn.flow,
                lambda payload: self.message(conn, payload),
                self.max_message,
                conn.ponged,
            )

    def max_message(self) -> int:
        return self.limits.ws_message_bytes or DEFAULT_MAX_MESSAGE

    def message(self, conn: ClientConn, payload: bytes) -> Awaitable[None] | None:
        conn.calls += 1
        try:
            rpc, pending = self.pipeline.start_message(payload, conn, conn)
        except Exception:
            internal_error(conn, conn.network)
            return None
        if pending is None:
            reply(conn, rpc)
            return None
        task = asyncio.create_task(self._finish(conn, rpc, pending))
        conn.tasks.add(task)
        task.add_done_callback(conn.tasks.discard)
        if len(conn.tasks) >= MAX_IN_FLIGHT:
            return self._room(conn)
        return None

    async def _finish(self, conn: ClientConn, rpc: RpcContext, pending: Awaitable[None]) -> None:
        try:
            await pending
        except asyncio.CancelledError:
            raise
        except Exception:
            internal_error(conn, conn.network)
            return
        reply(conn, rpc)

    @staticmethod
    async def _room(conn: ClientConn) -> None:
        while len(conn.tasks) >= MAX_IN_FLIGHT:
            await asyncio.wait(list(conn.tasks), return_when=asyncio.FIRST_COMPLETED)
