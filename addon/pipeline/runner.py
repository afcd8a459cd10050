"""The request pipeline: its steps, in order, and the addon that runs them.

An RPC call (a POST to ``/rpc/v1/<network>``, or one WebSocket message) enters
through the gate (route, body limit, parse; ``addon/pipeline/gate.py``) and goes through
``STEPS``::

    allowlist → subscription_limits → rate_limit → subscribe → pin_to_head
              → cache_lookup → reserve_bytes → forward_pending → learn → cache_store
              → charge_bytes → record → respond

Each step is a plain function ``step(rpc, runtime)`` around a pure core; it
works on the call alone (``RpcContext``), never on a mitmproxy flow. A step
that ends the call (a refusal) sets ``rpc.reply``, which stops the run, and so
does a client that went away while a step waited. ``addon/pipeline/reply.py`` turns
the reply into the HTTP response or the WebSocket message, in one place. The
subscription steps act only on a socket's subscribe and unsubscribe calls: a
subscribe is admitted, charged, recorded and counted like any call, and a
batch that mixes them with plain calls is taken or refused whole.
``addon/addons.py`` puts it in mitmproxy's addon chain.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Any

from mitmproxy import http

from addon.pipeline.context import WS_KEY, Origin, Reply, RpcContext, Socket
from addon.pipeline.gate import open_message, open_rpc
from addon.pipeline.prewarm import Prewarmer
from addon.pipeline.reply import deliver, json_response
from addon.rpc.jsonrpc import INTERNAL_ERROR, error_obj
from addon.rpc.later import Later
from addon.runtime import Runtime, RuntimeHolder
from addon.steps.allowlist import allowlist
from addon.steps.cache_lookup import cache_lookup
from addon.steps.cache_store import cache_store
from addon.steps.charge_bytes import charge_bytes
from addon.steps.forward_pending import forward_pending
from addon.steps.learn import learn
from addon.steps.pin_to_head import pin_to_head
from addon.steps.rate_limit import rate_limit
from addon.steps.record import record
from addon.steps.reserve_bytes import reserve_bytes
from addon.steps.respond import respond
from addon.steps.subscribe import subscribe
from addon.steps.subscription_limits import subscription_limits

log = logging.getLogger("chainproxy")

Step = Callable[[RpcContext, Runtime], Awaitable[Any] | None]

STEPS: tuple[Step, ...] = (
    allowlist,
    subscription_limits,
    rate_limit,
    subscribe,
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
_INTERNAL = error_obj(None, INTERNAL_ERROR, "internal proxy error")


class RpcPipeline:
    """The RPC path as one mitmproxy addon: gate, then ``steps`` in order.

    A run stays synchronous until a step returns an awaitable (only the
    forward and a shared store do), so a call answered from the cache or
    refused costs no coroutine. A step that waits on Redis returns a
    ``Later``: the run goes on from its callback (``_park``), no coroutine."""

    def __init__(self, holder: RuntimeHolder, steps: Sequence[Step] = STEPS) -> None:
        self.holder = holder
        self.steps = tuple(steps)
        self.prewarm = Prewarmer(holder)

    def http_connect(self, flow: http.HTTPFlow) -> None:
        # A reverse proxy has no business tunnelling anywhere.
        flow.response = json_response(
            405, {"error": {"code": 405, "message": "CONNECT is not supported"}}
        )

    def request(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        """A POST: its call through the steps, its reply as the response."""
        # a WebSocket handshake is addon/sockets/handler.py's; its messages come to ``message``
        if flow.response or flow.error or not flow.live or WS_KEY in flow.metadata:
            return None
        rt = self.holder.runtime
        if rt is None:
            flow.response = json_response(503, _NOT_CONFIGURED)
            return None
        if rt.on_new_head is None:
            self.prewarm.install(rt)
        rpc = open_rpc(flow, rt)
        if rpc is None:
            return None
        pending = self._run(rpc, rt, 0)
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
        if rt.on_new_head is None:
            self.prewarm.install(rt)
        rpc = open_message(content, sock, origin, rt)
        return rpc, self._run(rpc, rt, 0)

    def _run(self, rpc: RpcContext, rt: Runtime, start: int) -> Awaitable[None] | None:
        """The steps from ``start`` on, synchronously until one must wait: then
        what to await for the rest of the run."""
        steps = self.steps
        origin = rpc.origin
        for i in range(start, len(steps)):
            if rpc.reply is not None or not origin.live:
                break
            pending = steps[i](rpc, rt)
            if pending is None:
                continue
            if isinstance(pending, Later):
                if not pending.done:
                    return self._park(pending, rpc, rt, i + 1)
                try:
                    pending.result()  # resolved at once (e.g. the link refused): go on
                except Exception:
                    _failed(rpc)
                    return None
                continue
            return self._resume(pending, rpc, rt, i + 1)
        self._finished(rpc, rt)
        return None

    def _park(self, pending: Later[Any], rpc: RpcContext, rt: Runtime, nxt: int) -> _Rest:
        """A step waits on a reply read by callback (the shared quota): the run
        goes on from that callback, inside the connection's ``data_received``,
        with no coroutine of its own."""
        rest = _Rest()

        def wake(done: Later[Any]) -> None:
            if rest.abandoned:
                return  # the call's task was cancelled: nobody delivers this call
            try:
                done.result()  # the step's own callback failed: answered 500
                more = self._run(rpc, rt, nxt)
            except Exception:
                _failed(rpc)
                more = None
            rest.resolve(more)

        pending.then(wake)
        return rest

    @staticmethod
    def _finished(rpc: RpcContext, rt: Runtime) -> None:
        reply = rpc.reply
        if reply is not None:
            seconds = rpc.stop(rt.clock())
            rt.metrics.count_flow(rpc, reply.outcome, reply.status, seconds)
            if rt.access_log is not None:
                rt.access_log.write(rpc, reply.status, reply.outcome, seconds)

    async def _resume(
        self, pending: Awaitable[None], rpc: RpcContext, rt: Runtime, nxt: int
    ) -> None:
        try:
            await pending
            more = self._run(rpc, rt, nxt)
            if more is not None:
                await more
        except Exception:
            _failed(rpc)


class _Rest(Later[Any]):
    """The rest of a parked run: what it waits on next once the callback ran
    (a forward, another parked step) or None. Awaiting it awaits those too, so
    one ``await`` still runs a call to its end, as with ``_resume``."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        more = yield from super().__await__()
        while more is not None:
            more = yield from more.__await__()


def _failed(rpc: RpcContext) -> None:
    """A bug in an awaited step: mitmproxy would stop this event's addons here
    (the Guard never runs) and forward the flow to its reverse target itself.
    Answer it, loudly, instead (called inside the ``except``)."""
    methods = [c.method for c in rpc.parsed.calls] if rpc.parsed else []
    log.exception("pipeline step failed on %s %s", rpc.network, methods[:3])
    if rpc.reply is None:
        rpc.reply = Reply(500, _INTERNAL, "error")
