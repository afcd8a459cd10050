"""Drain on SIGTERM: stop taking connections, answer every call in flight,
close WebSocket clients with 1001 ("going away") once their calls are
answered, spool the usage records, and exit within ``proxy.drain_s``
(earlier when idle).

mitmproxy's own SIGTERM handler stops at once: calls in flight get no answer
and sockets end with 1006. This addon replaces it when mitmproxy runs. The
listening sockets close first (``server=False``: a balancer or the other
workers take new connections); a request that still arrives on a kept-alive
connection is answered, with ``Connection: close``. A second SIGTERM stops at
once. The usage records left are spooled by ``ShipperAddon.done`` and
delivered by whichever process runs next; those the spool cannot take (a full
disk) get one last delivery first (``before_stop``), at most
``LAST_DELIVERY_S`` past the drain.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Any

from mitmproxy import ctx, http

from addon.hooks.holder import RuntimeHolder
from addon.mitm import shutdown
from addon.mitm.http_requests import asks_close

log = logging.getLogger("chainproxy")

LAST_DELIVERY_S = 5.0  # the most the stop waits for the sidecar to take what memory holds


async def wait_until(done: Callable[[], bool], deadline: float) -> None:
    """Until ``done()`` or ``deadline`` (loop time). Polled: what it watches
    (flows and calls in flight) changes in many hooks, and a drain is rare."""
    loop = asyncio.get_running_loop()
    while not done() and loop.time() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.02)


class Drain:
    def __init__(
        self,
        holder: RuntimeHolder,
        sockets: Any,
        before_stop: Callable[[float], Awaitable[object]] | None = None,
    ) -> None:
        self.holder = holder
        self.sockets = sockets  # addon/hooks/websocket.py's WebSocketRpc: its drain()
        # the usage shipper's last delivery (addon/hooks/shipping.py), given a timeout
        self.before_stop = before_stop
        self.inflight: set[str] = set()  # HTTP flows not yet answered
        self.draining = False
        self.stopping = False  # the drain is over and the process stops: nothing is taken
        self._task: asyncio.Task[None] | None = None

    def load(self, loader: Any) -> None:
        # before mitmproxy's master runs: the stop's false alarm filtered
        # (addon/mitm/shutdown.py), also after mitmproxy's handler is gone
        try:
            shutdown.install(asyncio.get_running_loop())
        except RuntimeError:  # no loop runs (a tool, a test)
            pass

    def running(self) -> None:
        try:
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, self.start)
        except (NotImplementedError, RuntimeError):  # not the main thread (tests)
            pass

    def requestheaders(self, flow: http.HTTPFlow) -> None:
        if self.stopping:
            # A request that arrives on a kept-alive connection after the drain
            # ended is not taken: the stop could cut its answer after its usage
            # was recorded, and a balancer that sends it again to another worker
            # (HAProxy's retry-on empty-response) would leave two records of one
            # call (seen once in the soak smoke). Closed unanswered, it is sent
            # again there, or by the client's library, exactly once.
            if flow.killable:
                flow.kill()
            return
        self.inflight.add(flow.id)

    def response(self, flow: http.HTTPFlow) -> None:
        self.inflight.discard(flow.id)
        if flow.response is None or flow.websocket is not None:
            return
        if self.draining or asks_close(flow.request.headers.get("connection")):
            # draining: its next call goes elsewhere; a client's own ``CLOSE``
            # (mitmproxy reads only the lower-case token) is honoured too
            flow.response.headers["Connection"] = "close"

    def error(self, flow: http.HTTPFlow) -> None:
        self.inflight.discard(flow.id)

    def start(self) -> None:
        if self.draining:  # asked twice: now
            log.warning("second SIGTERM: stopping without waiting")
            self.stopping = True
            ctx.master.shutdown()
            return
        self.draining = True
        self._task = asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        rt = self.holder.runtime
        drain_s = rt.config.proxy.drain_s if rt is not None else 10.0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + drain_s
        sockets, messages = self.sockets.in_flight()
        log.info(
            "SIGTERM: draining (no new connections; %d HTTP calls in flight, %d WebSocket "
            "messages on %d sockets; at most %.0f s)",
            len(self.inflight),
            messages,
            sockets,
            drain_s,
        )
        try:
            ctx.options.update(server=False)  # stop listening; open connections stay
            await wait_until(lambda: not self.inflight, deadline)
            closed = await self.sockets.drain(deadline)
            await wait_until(lambda: not self.inflight, deadline)  # calls that came meanwhile
            log.info(
                "drained: %d WebSocket clients sent 1001, %d calls left unanswered",
                closed,
                len(self.inflight),
            )
        except Exception:
            log.exception("drain failed: stopping now")
        finally:
            self.stopping = True
            await self._last_delivery(deadline)
            ctx.master.shutdown()

    async def _last_delivery(self, deadline: float) -> None:
        """Nothing more is answered: the usage records the spool could not take
        go to the sidecar now, in the drain's time left (at least a second,
        at most ``LAST_DELIVERY_S``), or are lost with the process (logged)."""
        if self.before_stop is None:
            return
        left = deadline - asyncio.get_running_loop().time()
        try:
            await self.before_stop(min(LAST_DELIVERY_S, max(1.0, left)))
        except Exception:
            log.exception("usage: the last delivery at stop failed")
