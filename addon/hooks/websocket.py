"""JSON-RPC over WebSocket on the same paths (``ws://host/rpc/v1/<network>``),
for the clients that speak nothing else (the bittensor SDK,
async-substrate-interface, substrate-interface with a ``ws://`` URL).

Every message a client sends is one JSON-RPC body (a call or a batch) and goes
through exactly the steps of a POST (``addon/hooks/pipeline.py``), as the client
identified once at the handshake: same allowlist, same per-client quota (each
call counts, a subscribe too), same cache, upstream choice, failover and usage
records. The answer body is sent back as one text message; the HTTP status a
POST would have had is not, the JSON-RPC error inside says it all. Read
subscriptions are steps of the same run (``addon/steps/subscribe.py``) over
``addon/subs`` (shared upstream subscriptions that move to another node when
theirs fails).

mitmproxy relays a WebSocket only between two connections, so the handshake
goes to a sink of our own (``addon/sockets/sink.py``), which accepts and never
speaks. Client messages are dropped before they reach it; answers are injected
towards the client. Calls on one connection are answered concurrently (clients
match answers by id), at most ``MAX_IN_FLIGHT`` at a time: past that,
mitmproxy stops reading from that client until one is answered. A socket that
ends ends what it holds: follows, subscriptions, storage operations.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
from collections.abc import Awaitable
from typing import Any

from mitmproxy import ctx, http
from mitmproxy.utils.asyncio_utils import create_task

from addon.hooks.drain import wait_until
from addon.hooks.holder import RuntimeHolder
from addon.mitm import internals as mitm_internals
from addon.mitm import limits as mitm_limits
from addon.mitm.responses import json_response
from addon.mitm.tuning import DIRECT_OPTION, flows_acted_on
from addon.pipeline.context import WS_HEADERS_KEY, WS_KEY
from addon.pipeline.gate import flow_caller
from addon.pipeline.paths import RpcRoute, classify
from addon.quota.local import Decision
from addon.quota.refusal import quota_error
from addon.quota.tiers import Caller
from addon.reporting.live_metrics import refusal_policy
from addon.rpc.jsonrpc import Refusal, dumps, error_obj
from addon.rpc.request_ids import request_id_of
from addon.runtime import Runtime
from addon.sockets.conn import SLOW_CLIENT_CLOSE, ClientConn
from addon.sockets.direct import DirectAnswers, internal_error, reply
from addon.sockets.keepalive import CLOSE_CODE, CLOSE_REASON, Pinger
from addon.sockets.sink import FLOW_HEADER, Sink
from addon.sockets.slots import LEASE_S, RETRY_AFTER_S, socket_error
from addon.steps import new_spec_reads
from common.config.model import WebSocketConfig

log = logging.getLogger("chainproxy")

GOING_AWAY = 1001  # the close code of a drain: the server is going away, come back

KEEP_MESSAGES = 100  # messages kept on a flow for mitmweb (the rest would grow forever)


def is_upgrade(request: http.Request) -> bool:
    """A well-formed WebSocket handshake (RFC 6455 4.1). Anything less is left
    to the gate (``open_rpc``), which answers a GET on an RPC path with the 405."""
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


class WebSocketRpc:
    """Before the pipeline: takes WebSocket handshakes on RPC paths; answers messages."""

    def __init__(
        self,
        holder: RuntimeHolder,
        pipeline: Any,
        read_limits: mitm_limits.ReadLimits | None = None,
    ) -> None:
        self.holder = holder
        self.pipeline = pipeline  # the RPC pipeline (addon/hooks/pipeline.py)
        # refusals of the WebSocket message limit (by default one never installed: none)
        self.read_limits = read_limits if read_limits is not None else mitm_limits.ReadLimits()
        self.sink = Sink(on_pong=self._ponged)
        self.direct = DirectAnswers(pipeline, self.read_limits.limits)  # the usual reads
        self._conns: dict[str, ClientConn] = {}
        self._renewer: asyncio.Task[None] | None = None
        # pings to every client socket; one that stops answering is closed
        self.pinger = Pinger(self._conns.values, self._ping_settings, self._ping, self._dead)

    def request(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        # Synchronous for plain POSTs (no coroutine each); a handshake returns one.
        rt = self.holder.runtime
        if flow.response or flow.error or not flow.live or rt is None:
            return None
        if not is_upgrade(flow.request):
            return None
        route = classify("POST", flow.request.path, rt.config.proxy.networks)
        if not isinstance(route, RpcRoute):
            return None  # the pipeline answers it (404 for an unknown network)
        caller, _ = flow_caller(flow, rt)  # once: every message of the socket is this client's
        if isinstance(caller, Refusal):
            _refuse(flow, route, rt, caller.status, caller, ())
            return None
        return self._handshake(flow, route, rt, caller)

    async def _handshake(
        self, flow: http.HTTPFlow, route: RpcRoute, rt: Runtime, caller: Caller
    ) -> None:
        """A client over its quota, or holding all the sockets it may, gets 429
        with ``Retry-After`` (not upgraded); else the socket is taken."""
        decision = rt.quotas.decide(caller.client, 1, caller.tier, take=False)
        if not isinstance(decision, Decision):  # the shared quota: one Redis round trip
            decision = await decision
        if not decision.allowed:
            body = quota_error(None, decision, 1, caller.client)
            _refuse(flow, route, rt, 429, body, decision.headers(), "over quota")
            return
        cap = _socket_cap(rt, caller)
        taken = rt.slots.acquire(caller.client, flow.id, cap)
        if not isinstance(taken, bool):
            taken = await taken
        if not taken:
            _refuse(flow, route, rt, 429, socket_error(cap), _SOCKET_RETRY, "too many sockets")
            return
        port = await self.sink.start()
        flow.metadata[WS_KEY] = route.network
        flow.metadata[WS_HEADERS_KEY] = {
            "client": caller.client,
            "tier": caller.tier,
            "address": caller.address,
        }
        flow.request.headers[FLOW_HEADER] = flow.id
        flow.request.scheme = "http"
        flow.request.host = "127.0.0.1"
        flow.request.port = port  # the path stays: logs and mitmweb show the real one
        flow.comment = f"WebSocket JSON-RPC, {route.network}"
        self._renew_leases(rt)
        self.pinger.start()

    def _conn(self, flow: http.HTTPFlow) -> ClientConn | None:
        conn = self._conns.get(flow.id)
        if conn is not None:
            return conn
        network = flow.metadata.get(WS_KEY)
        if network is None:
            return None  # not an RPC socket of ours
        # (also a socket opened before a hot reload, that another instance saw start)
        rt = self.holder.runtime
        ws = rt.config.proxy.websocket if rt is not None else WebSocketConfig()
        if rt is not None:
            rt.ws_connections += 1
        facts = flow.metadata.get(WS_HEADERS_KEY, {})
        conn = self._conns[flow.id] = ClientConn(
            flow,
            network,
            facts.get("client", "unknown"),
            tier=facts.get("tier"),
            address=facts.get("address", ""),
            master=ctx.master,
            max_queued=ws.max_queued_notifications,
            max_buffer_bytes=ws.max_buffer_bytes,
            on_slow=lambda c: self._close(c, SLOW_CLIENT_CLOSE, "notifications not read"),
            direct=bool(getattr(ctx.options, DIRECT_OPTION, True))
            and not flows_acted_on(ctx.options),
        )
        self.direct.attach(conn, ctx.master)
        return conn

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        """The sink's 101 (aiohttp, in this process): a request id, not its name."""
        response = flow.response
        if response is not None and WS_KEY in flow.metadata:
            response.headers["X-Request-Id"] = request_id_of(
                flow.request.headers.get("X-Request-Id")
            )
            response.headers.pop("Server", None)

    def websocket_start(self, flow: http.HTTPFlow) -> None:
        self._conn(flow)

    async def websocket_message(self, flow: http.HTTPFlow) -> None:
        conn = self._conn(flow)
        if conn is None or flow.websocket is None:
            return
        messages = flow.websocket.messages
        msg = messages[-1]
        if len(messages) > KEEP_MESSAGES:
            del messages[: len(messages) - KEEP_MESSAGES]
        if not msg.from_client:
            if msg.injected:
                conn.relayed += 1  # one of ours is on its way to the client
            else:
                msg.drop()  # the sink never speaks; nothing of it reaches the client
            return
        msg.drop()  # answered by us, never relayed to the sink
        refused = self.read_limits.refused_message(flow.client_conn.id)
        if refused is not None:
            # over max_body_bytes: its content was never kept (addon/mitm/limits.py)
            conn.calls += 1
            conn.send(dumps(refused))
            return
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
        self.read_limits.refused_message(flow.client_conn.id)  # one cut off by the close
        conn = self._conns.pop(flow.id, None)
        if conn is None:
            return
        if conn.reads is not None:
            conn.reads.release()
        for task in list(conn.tasks):
            task.cancel()
        rt = self.holder.runtime
        if rt is not None:
            _count_messages(rt, conn)
            rt.ws_connections = max(0, rt.ws_connections - 1)
            _release(rt, conn)  # what it holds ends
            rt.slots.release(flow.id)  # ... and frees its slot
        flow.comment = conn.describe()

    def _close(self, conn: ClientConn, code: int, reason: str) -> None:
        """Close a client socket with ``code``: its subscriptions end now, its
        slot when mitmproxy ends the socket (``websocket_end``)."""
        conn.closing = True
        rt = self.holder.runtime
        if rt is not None:
            _release(rt, conn)  # what it holds ends
        create_task(
            self.sink.close_flow(conn.flow.id, code, reason),
            name=f"chainproxy: close a WebSocket client ({code})",
            keep_ref=True,
        )

    def _ping_settings(self) -> tuple[float, float]:
        rt = self.holder.runtime
        ws = rt.config.proxy.websocket if rt is not None else WebSocketConfig()
        return ws.ping_interval_s, ws.ping_timeout_s

    def _ping(self, conn: Any, payload: bytes) -> None:
        if not conn.ping(payload):  # not a direct socket: the sink pings it
            ping = self.sink.ping_flow(conn.flow.id, payload)
            create_task(ping, name="chainproxy: ping a WebSocket client", keep_ref=True)

    def _ponged(self, flow_id: str) -> None:
        conn = self._conns.get(flow_id)
        if conn is not None:
            conn.ponged()

    def _dead(self, conn: Any) -> None:
        log.warning("WebSocket client %s answers no ping: closed (1011)", conn.client)
        self._close(conn, CLOSE_CODE, CLOSE_REASON)

    async def _answer(self, flow: http.HTTPFlow, conn: ClientConn, content: bytes) -> None:
        try:
            rpc = await self.pipeline.message(content, conn, conn)
        except asyncio.CancelledError:
            raise
        except Exception:
            internal_error(conn, conn.network)
            return
        finally:
            conn.slots.release()
        reply(conn, rpc)

    def in_flight(self) -> tuple[int, int]:
        """The sockets open, and their messages not yet answered (the drain's log)."""
        return len(self._conns), sum(len(c.tasks) for c in self._conns.values())

    async def drain(self, deadline: float) -> int:
        """Going away (``addon/hooks/drain.py``): each socket's calls in flight are
        answered, its subscriptions end, what it was already sent is flushed,
        then it is closed with 1001, all by ``deadline`` (loop time). New
        messages meanwhile are still answered. Returns the sockets closed."""
        conns = list(self._conns.values())
        await wait_until(lambda: not any(c.tasks for c in conns), deadline)
        rt = self.holder.runtime
        for conn in conns:
            if rt is not None:
                _release(rt, conn)  # what it holds ends
        await asyncio.sleep(0)  # the writes queued for this loop turn go out first
        await asyncio.sleep(0)
        closed = await asyncio.gather(
            *(self.sink.close_flow(c.flow.id, GOING_AWAY, "server going away") for c in conns)
        )
        return sum(closed)

    def done(self) -> None:
        # synchronous (hot reload): the sink's close is scheduled; open
        # connections to it end, and their clients reconnect
        rt = self.holder.runtime
        for conn in self._conns.values():
            if conn.reads is not None:
                conn.reads.release()  # the next instance reads through mitmproxy
            for task in list(conn.tasks):
                task.cancel()
            if rt is not None:
                _count_messages(rt, conn)
                _release(rt, conn)  # what it holds ends
                rt.slots.release(conn.flow.id)
        self._conns.clear()
        if self._renewer is not None:
            self._renewer.cancel()
        self.pinger.stop()
        self.sink.close()

    def _renew_leases(self, rt: Runtime) -> None:
        """While sockets are open, their slots' leases are renewed (a proxy that
        dies stops renewing: its slots free themselves after ``LEASE_S``)."""
        if self._renewer is None or self._renewer.done():
            self._renewer = create_task(
                self._renew_loop(), name="chainproxy: renew WebSocket slots", keep_ref=True
            )

    async def _renew_loop(self) -> None:
        while True:
            await asyncio.sleep(LEASE_S / 3)
            rt = self.holder.runtime
            if rt is None:
                continue
            try:
                await rt.slots.renew(self._conns.keys())
            except Exception:
                log.exception("renewing WebSocket slots failed; they are tried again")


_SOCKET_RETRY = (("Retry-After", str(RETRY_AFTER_S)),)


def _count_messages(rt: Runtime, conn: ClientConn) -> None:
    """A socket's messages by who read them (whether the fast path is in use)."""
    direct = conn.reads.messages if conn.reads is not None else 0
    metric, network = "chainproxy_ws_messages_total", conn.network
    if direct:
        rt.metrics.count_extra(metric, direct, network=network, path="direct")
    if conn.calls > direct:
        rt.metrics.count_extra(metric, conn.calls - direct, network=network, path="mitmproxy")


def _socket_cap(rt: Runtime, caller: Caller) -> int:
    tier = rt.quotas.book.tiers.get(caller.tier) if caller.tier is not None else None
    if tier is not None and tier.max_connections_per_client is not None:
        return tier.max_connections_per_client
    return rt.config.proxy.websocket.max_connections_per_client


def _refuse(
    flow: http.HTTPFlow,
    route: RpcRoute,
    rt: Runtime,
    status: int,
    body: Any,
    headers: Any,
    why: str = "",
) -> None:
    """A handshake refused by a policy: its JSON-RPC error, not upgraded."""
    if isinstance(body, Refusal):
        body = error_obj(body.id, body.code, body.message, body.data)
    request_id = ("X-Request-Id", request_id_of(flow.request.headers.get("X-Request-Id")))
    flow.response = json_response(status, body, (*headers, request_id))
    rt.metrics.count_refusal(refusal_policy(body))
    flow.comment = (
        f"WebSocket JSON-RPC, {route.network}: refused, {why or body['error']['message']}"
    )


def _release(rt: Runtime, conn: ClientConn) -> None:
    rt.release_socket(conn)
    new_spec_reads.release(conn)
