"""The request pipeline: its steps, in order, and the addon that runs them.

An RPC call (a POST to ``/rpc/v1/<network>``, or one WebSocket message) enters
through the gate (route, body limit, parse; ``addon/pipeline/gate.py``) and goes through
``STEPS``::

    allowlist → subscription_limits → rate_limit → subscribe → new_spec_reads → chain_head
              → head_answer → pin_to_head → cache_lookup → reserve_bytes → forward_pending
              → learn → cache_store → charge_bytes → record → respond

Each step is a plain function ``step(rpc, runtime)`` around a pure core; it
works on the call alone (``RpcContext``), never on a mitmproxy flow. The loop
that runs them is ``addon/pipeline/runner.py``'s: a step that ends the call (a
refusal) sets ``rpc.reply``, which stops the run, and so does a client that
went away while a step waited. ``addon/pipeline/reply.py`` turns
the reply into the HTTP response or the WebSocket message, in one place. The
subscription steps act only on a socket's subscribe and unsubscribe calls: a
subscribe is admitted, charged, recorded and counted like any call, and a
batch that mixes them with plain calls is taken or refused whole.
``addon/addons.py`` puts it in mitmproxy's addon chain.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Sequence

from mitmproxy import http

from addon.hooks.holder import RuntimeHolder
from addon.mitm.responses import json_response
from addon.pipeline.context import WS_KEY, Origin, Reply, RpcContext, Socket
from addon.pipeline.gate import open_message, open_rpc
from addon.pipeline.reply import deliver
from addon.pipeline.runner import Runner, Step
from addon.rpc.jsonrpc import INTERNAL_ERROR, error_obj
from addon.runtime import Runtime
from addon.steps.allowlist import allowlist
from addon.steps.cache_lookup import cache_lookup
from addon.steps.cache_store import cache_store
from addon.steps.chain_head import chain_head
from addon.steps.charge_bytes import charge_bytes
from addon.steps.forward_pending import forward_pending
from addon.steps.learn import learn
from addon.steps.new_spec_reads import new_spec_reads
from addon.steps.pin_to_head import head_answer, pin_to_head
from addon.steps.rate_limit import rate_limit
from addon.steps.record import record
from addon.steps.reserve_bytes import reserve_bytes
from addon.steps.respond import respond
from addon.steps.subscribe import subscribe
from addon.steps.subscription_limits import subscription_limits

log = logging.getLogger("chainproxy")

STEPS: tuple[Step, ...] = (
    allowlist,
    subscription_limits,
    rate_limit,
    subscribe,
    new_spec_reads,
    chain_head,
    head_answer,
    pin_to_head,
    cache_lookup,
    reserve_bytes,
    forward_pending,
    learn,
    cache_store,
    charge_bytes,
    record,
    respond,
)

_NOT_CONFIGURED = error_obj(None, INTERNAL_ERROR, "chainproxy is not configured")


class RpcPipeline:
    """The RPC path as one mitmproxy addon: gate, then ``steps`` in order.

    A run stays synchronous until a step returns an awaitable (only the
    forward and a shared store do), so a call answered from the cache or
    refused costs no coroutine. A step that waits on Redis returns a
    ``Later``: the run goes on from its callback, no coroutine
    (``addon/pipeline/runner.py``)."""

    def __init__(self, holder: RuntimeHolder, steps: Sequence[Step] = STEPS) -> None:
        self.holder = holder
        self.runner = Runner(steps, finished=_finished)

    @property
    def steps(self) -> tuple[Step, ...]:
        return self.runner.steps

    @steps.setter
    def steps(self, steps: Sequence[Step]) -> None:
        self.runner.steps = tuple(steps)

    def http_connect(self, flow: http.HTTPFlow) -> None:
        # A reverse proxy has no business tunnelling anywhere.
        flow.response = json_response(
            405, {"error": {"code": 405, "message": "CONNECT is not supported"}}
        )

    def request(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        """A POST: its call through the steps, its reply as the response."""
        # a WebSocket handshake is addon/hooks/websocket.py's; its messages come to ``message``
        if flow.response or flow.error or not flow.live or WS_KEY in flow.metadata:
            return None
        rt = self.holder.runtime
        if rt is None:
            flow.response = json_response(503, _NOT_CONFIGURED)
            return None
        rpc = open_rpc(flow, rt)
        if rpc is None:
            return None
        pending = self.runner.run(rpc, rt)
        if pending is None:
            deliver(flow, rpc, rt.clock())
            return None
        return self._deliver_later(flow, rpc, rt, pending)

    async def _deliver_later(
        self, flow: http.HTTPFlow, rpc: RpcContext, rt: Runtime, pending: Awaitable[None]
    ) -> None:
        await pending
        deliver(flow, rpc, rt.clock())

    async def message(self, content: bytes, sock: Socket, origin: Origin) -> RpcContext:
        """One WebSocket message: its call through the same steps; the caller
        sends ``rpc.reply`` (``addon/pipeline/reply.message_body``)."""
        rpc, pending = self.start_message(content, sock, origin)
        if pending is not None:
            await pending
        return rpc

    def start_message(
        self, content: bytes, sock: Socket, origin: Origin
    ) -> tuple[RpcContext, Awaitable[None] | None]:
        """``message`` without a coroutine where none is needed: the run, and
        what is left to await (None: ``rpc.reply`` is there already, e.g. a
        cache hit). The direct WebSocket reads answer most calls this way."""
        rt = self.holder.runtime
        if rt is None:
            reply = Reply(503, _NOT_CONFIGURED, "error")
            return RpcContext(sock.network, 0.0, origin, reply=reply), None
        rpc = open_message(content, sock, origin, rt)
        return rpc, self.runner.run(rpc, rt)


def _finished(rpc: RpcContext, rt: Runtime) -> None:
    """A run that has its reply: counted in the live metrics and the access log."""
    reply = rpc.reply
    assert reply is not None
    seconds = rpc.stop(rt.clock())
    rt.metrics.count_flow(rpc, reply.outcome, reply.status, seconds)
    if rt.access_log is not None:
        rt.access_log.write(rpc, reply.status, reply.outcome, seconds)
