"""The step loop: one call through a sequence of steps, the one loop every
run uses (a client's call, ``addon/hooks/pipeline.py``; a pre-warm read,
``addon/hooks/prewarm.py``).

Each step is ``step(rpc, deps)``: it works on the call alone (``RpcContext``)
and the dependencies the loop is given. A step that ends the call (a refusal)
sets ``rpc.reply``, which stops the run, and so does a client that went away
while a step waited. A run stays synchronous until a step returns an
awaitable (only the forward and a shared store do), so a call answered from
the cache or refused costs no coroutine. A step that waits on Redis returns a
``Later``: the run goes on from its callback (``_park``), no coroutine.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Any

from addon.pipeline.context import Reply, RpcContext
from addon.rpc.jsonrpc import INTERNAL_ERROR, error_obj
from addon.rpc.later import Later
from addon.rpc.splice import BREATHE_BYTES

log = logging.getLogger("chainproxy")

Step = Callable[[RpcContext, Any], Awaitable[Any] | Later[Any] | None]
# called once a run ends with a reply (not when its client went away)
Finished = Callable[[RpcContext, Any], None]

_INTERNAL = error_obj(None, INTERNAL_ERROR, "internal proxy error")


class Runner:
    """``steps`` in order over one call; ``finished(rpc, deps)`` once it has
    its reply."""

    __slots__ = ("finished", "steps")

    def __init__(self, steps: Sequence[Step], finished: Finished | None = None) -> None:
        self.steps = tuple(steps)
        self.finished = finished

    def run(self, rpc: RpcContext, deps: Any, start: int = 0) -> Awaitable[None] | None:
        """The steps from ``start`` on, synchronously until one must wait: then
        what to await for the rest of the run."""
        steps = self.steps
        origin = rpc.origin
        for i in range(start, len(steps)):
            if rpc.reply is not None or not origin.live:
                break
            pending = steps[i](rpc, deps)
            if pending is None:
                continue
            if isinstance(pending, Later):
                if not pending.done:
                    return self._park(pending, rpc, deps, i + 1)
                try:
                    pending.result()  # resolved at once (e.g. the link refused): go on
                except Exception:
                    _failed(rpc)
                    return None
                continue
            return self._resume(pending, rpc, deps, i + 1)
        if rpc.reply is not None and self.finished is not None:
            self.finished(rpc, deps)
        return None

    def _park(self, pending: Later[Any], rpc: RpcContext, deps: Any, nxt: int) -> _Rest:
        """A step waits on a reply read by callback (the shared quota): the run
        goes on from that callback, inside the connection's ``data_received``,
        with no coroutine of its own."""
        rest = _Rest()

        def wake(done: Later[Any]) -> None:
            if rest.abandoned:
                return  # the call's task was cancelled: nobody delivers this call
            try:
                done.result()  # the step's own callback failed: answered 500
                more = self.run(rpc, deps, nxt)
            except Exception:
                _failed(rpc)
                more = None
            rest.resolve(more)

        pending.then(wake)
        return rest

    async def _resume(self, pending: Awaitable[None], rpc: RpcContext, deps: Any, nxt: int) -> None:
        try:
            await pending
            if rpc.result is not None and rpc.result.body_bytes >= BREATHE_BYTES:
                await asyncio.sleep(0)  # a big answer: stored and answered in a turn of its own
            more = self.run(rpc, deps, nxt)
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
