"""Direct HTTP reads (``chainproxy_http_direct``, on by default): once
chainproxy has answered a call on a plain-text HTTP/1.1 keep-alive connection,
the connection's next requests are read by chainproxy itself
(``addon/mitm/http_reads.py``) and each plain ``POST /rpc/v1/<network>``
goes through the very steps of a POST mitmproxy relays (``RpcPipeline``'s
runner; the gate's ``open_direct``), its answer written as the bytes
mitmproxy would send (``addon/pipeline/reply.http_answer``). A cache hit or a
refusal is answered before the next request is read, with no task; a call
that goes upstream is awaited before the next one is read, so pipelined
requests are answered in order.

Everything else on the connection goes back to mitmproxy for good: other
paths, other methods, WebSocket upgrades, HTTP/1.0, ``Connection: close``,
``Expect``, chunked or oversized bodies, a drain, anything unusual. Requests
read here are counted by the live metrics and the access log like any call
(the runner's ``finished``), by the idle clock (``IdleConnections.busy``) and
by the drain; they are not flows, so mitmweb shows none: ``make inspect``
turns the option off.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any

from mitmproxy import connection, ctx, http
from mitmproxy.net.http import http1

from addon.hooks.drain import Drain
from addon.hooks.holder import RuntimeHolder
from addon.hooks.idle import IdleConnections
from addon.mitm import http_reads
from addon.mitm.http_requests import Request
from addon.mitm.limits import ReadLimits
from addon.mitm.tuning import HTTP_DIRECT_OPTION, flows_acted_on
from addon.pipeline.context import META_KEY, RpcContext
from addon.pipeline.gate import open_direct
from addon.pipeline.reply import http_answer
from addon.pipeline.runner import Runner

log = logging.getLogger("chainproxy")

METRIC = "chainproxy_http_direct_requests_total"  # calls read here, by network


class HttpDirect:
    """After the pipeline: takes over the reads of the connections it answered."""

    def __init__(
        self,
        holder: RuntimeHolder,
        runner: Runner,
        read_limits: ReadLimits,
        idle: IdleConnections,
        drain: Drain,
    ) -> None:
        self.holder = holder
        self.runner = runner  # the pipeline's steps (addon/hooks/pipeline.py)
        self.read_limits = read_limits
        self.idle = idle
        self.drain = drain
        self.conns: dict[str, http_reads.DirectHttpReads] = {}
        self._seq = 0  # names each call awaited here in the drain's set

    # --- mitmproxy hooks ---------------------------------------------------------------

    def response(self, flow: http.HTTPFlow) -> None:
        if not self._takes(flow):
            return
        rt = self.holder.runtime
        if rt is None:
            return
        cid = flow.client_conn.id
        reads = http_reads.take(
            ctx.master,
            flow,
            self.read_request,
            self.read_limits.limits,
            rt.config.proxy.max_body_bytes,
            on_busy=lambda busy: self.idle.busy(cid, busy),
            slow=self.read_limits.slow,
        )
        if reads is not None:
            self.conns[cid] = reads

    def client_disconnected(self, client: connection.Client) -> None:
        self.conns.pop(client.id, None)

    def _takes(self, flow: http.HTTPFlow) -> bool:
        """A call chainproxy answered on a connection that stays open, plain
        text, HTTP/1.1, not taken yet, with the option on and no drain."""
        response = flow.response
        request = flow.request
        return (
            response is not None
            and flow.websocket is None
            and META_KEY in flow.metadata
            and flow.client_conn.id not in self.conns
            and request.http_version == "HTTP/1.1"
            and not http1.connection_close(request.http_version, request.headers)
            and not http1.connection_close(response.http_version, response.headers)
            and not self.drain.draining
            and bool(getattr(ctx.options, HTTP_DIRECT_OPTION, False))
            and not flows_acted_on(ctx.options)
        )

    # --- one request read directly -------------------------------------------------------

    def read_request(  # not ``request``: that name is mitmproxy's hook
        self, reads: http_reads.DirectHttpReads, request: Request
    ) -> Awaitable[None] | http_reads._HandBack | None:
        rt = self.holder.runtime
        if rt is None or self.drain.draining:
            return http_reads.HAND_BACK  # mitmproxy's path: a 503, or Connection: close
        max_body = rt.config.proxy.max_body_bytes
        reads.reader.max_body = max_body  # a reload's limit, from the next request on
        if len(request.body) > max_body:
            return http_reads.HAND_BACK  # the 413 with Connection: close
        peername = reads.client.peername
        rpc = open_direct(request, peername[0] if peername else "unknown", reads, rt)
        if rpc is None:
            return http_reads.HAND_BACK
        rt.metrics.count_extra(METRIC, network=rpc.network)
        pending = self.runner.run(rpc, rt)
        if pending is None:
            _answer(reads, rpc, closing=False)  # (no drain began since the check above)
            return None
        return self._later(reads, rpc, pending)

    async def _later(
        self, reads: http_reads.DirectHttpReads, rpc: RpcContext, pending: Awaitable[None]
    ) -> None:
        self._seq += 1
        key = f"http-direct-{self._seq}"
        self.drain.inflight.add(key)
        try:
            await pending
        finally:
            self.drain.inflight.discard(key)
        # a drain began meanwhile: the answer says Connection: close, as the
        # drain makes mitmproxy's answers say, and the connection ends after it
        _answer(reads, rpc, closing=self.drain.draining)


def _answer(reads: Any, rpc: RpcContext, *, closing: bool) -> None:
    data = http_answer(rpc, close=closing)
    if data is not None:
        reads.write(data)
    if closing:
        reads.close()
