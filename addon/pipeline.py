"""The request pipeline, in order, and the list of mitmproxy addons.

An RPC call (a POST to ``/rpc/v1/<network>``, or one WebSocket message) goes
through ``STEPS`` after the gate (route, body limit, parse; ``addon/gate.py``)::

    allowlist → rate_limit → pin_to_head → cache_lookup → forward_pending → learn
              → cache_store → record → respond

Each step is a plain function ``step(flow, rpc, runtime)`` around a pure core;
a step that answers the flow (a refusal) ends the run, and so does a client
that went away while a step waited. The skip rules live in one place,
``RpcPipeline.request``. ``addon/rpcproxy.py`` only calls ``build_addons``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from mitmproxy import http

from addon.admit import allowlist, rate_limit
from addon.answer import forward_pending, learn, record, respond
from addon.cache_stage import cache_lookup, cache_store
from addon.context import META_KEY, WS_KEY, RpcContext
from addon.gate import open_rpc
from addon.jsonrpc import INTERNAL_ERROR, error_obj
from addon.lean import ProxyTuning
from addon.pin_stage import pin_to_head
from addon.respond import json_response
from addon.runtime import Runtime, RuntimeHolder
from addon.session import HttpSession
from addon.settings import Settings
from addon.shipping import UsageShipping
from addon.sidecar_pass import SidecarPassthrough
from addon.snapshot import SnapshotRefresher
from addon.websocket import WebSocketRpc

log = logging.getLogger("chainproxy")

Step = Callable[[http.HTTPFlow, RpcContext, Runtime], Awaitable[None] | None]

STEPS: tuple[Step, ...] = (
    allowlist,
    rate_limit,
    pin_to_head,
    cache_lookup,
    forward_pending,
    learn,
    cache_store,
    record,
    respond,
)


class RpcPipeline:
    """The RPC path as one mitmproxy addon: gate, then ``steps`` in order.

    ``request`` stays synchronous until a step returns an awaitable (only the
    forward does), so a call answered from the cache or refused costs no
    coroutine."""

    def __init__(self, holder: RuntimeHolder, steps: Sequence[Step] = STEPS) -> None:
        self.holder = holder
        self.steps = tuple(steps)

    def http_connect(self, flow: http.HTTPFlow) -> None:
        # A reverse proxy has no business tunnelling anywhere.
        flow.response = json_response(
            405, {"error": {"code": 405, "message": "CONNECT is not supported"}}
        )

    def request(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        # a WebSocket handshake is addon/websocket.py's; its messages come back here
        if flow.response or flow.error or not flow.live or WS_KEY in flow.metadata:
            return None
        rt = self.holder.runtime
        if rt is None:
            flow.response = json_response(
                503, error_obj(None, INTERNAL_ERROR, "chainproxy is not configured")
            )
            return None
        rpc = open_rpc(flow, rt)
        if rpc is None:
            return None
        return self._run(flow, rpc, rt, 0)

    def _run(
        self, flow: http.HTTPFlow, rpc: RpcContext, rt: Runtime, start: int
    ) -> Awaitable[None] | None:
        steps = self.steps
        for i in range(start, len(steps)):
            if flow.response is not None or not flow.live:
                break
            pending = steps[i](flow, rpc, rt)
            if pending is not None:
                return self._resume(pending, flow, rpc, rt, i + 1)
        self._finished(flow, rpc, rt)
        return None

    @staticmethod
    def _finished(flow: http.HTTPFlow, rpc: RpcContext, rt: Runtime) -> None:
        meta = flow.metadata.get(META_KEY)
        if flow.response is not None and meta is not None:
            seconds = rt.clock() - rpc.started
            rt.metrics.count_flow(rpc, meta["outcome"], flow.response.status_code, seconds)

    async def _resume(
        self, pending: Awaitable[None], flow: http.HTTPFlow, rpc: RpcContext, rt: Runtime, nxt: int
    ) -> None:
        try:
            await pending
            more = self._run(flow, rpc, rt, nxt)
            if more is not None:
                await more
        except Exception:
            # A bug in an awaited step: mitmproxy would stop this event's addons
            # here (the Guard never runs) and forward the flow to its reverse
            # target itself. Answer it, loudly, instead.
            log.exception("pipeline step failed on %s", flow.request.path[:200])
            if flow.response is None and flow.live:
                flow.response = json_response(
                    500, error_obj(None, INTERNAL_ERROR, "internal proxy error")
                )


class Guard:
    """Last in the chain: a flow nobody answered (a bug raised in a hook) gets a
    JSON 500 here, so mitmproxy never falls back to forwarding it itself."""

    def request(self, flow: http.HTTPFlow) -> None:
        if flow.response or flow.error or not flow.live or WS_KEY in flow.metadata:
            return
        log.error(
            "no stage answered %s %s: see the addon error above",
            flow.request.method,
            flow.request.path[:200],
        )
        flow.response = json_response(500, error_obj(None, INTERNAL_ERROR, "internal proxy error"))


def build_addons() -> list[Any]:
    holder = RuntimeHolder()
    rpc = RpcPipeline(holder)
    return [
        Settings(holder),  # the config → the runtime every part reads
        ProxyTuning(),  # mitmproxy options, fast dispatch / lean mode
        HttpSession(holder),  # the pooled HTTP session (upstreams and sidecar)
        SnapshotRefresher(holder),  # background: routing snapshot from the sidecar
        UsageShipping(holder),  # background: usage batches to the sidecar
        # before the pipeline: takes WebSocket handshakes, runs each message through it
        WebSocketRpc(holder, rpc),
        rpc,
        SidecarPassthrough(holder),  # every non-RPC path
        Guard(),
    ]
