"""One upstream subscription and the client subscriptions it feeds.

Notifications from whichever node feeds it go through one queue and one
worker, so clients see them in order; each (re)subscription has a generation
number and a notification of an older generation (a socket being left) is
dropped. The sequencer (``sequencer.py``) decides what is delivered.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from addon.rpc.sub_methods import SubKind
from addon.subs.sequencer import HeadSequencer, Step, StorageSequencer, ValueSequencer
from addon.subs.upstream import UpstreamError, UpstreamSocket
from addon.upstream.pool import Upstream
from common.jsontext import dumps_text

log = logging.getLogger("chainproxy.subs")

Sequencer = HeadSequencer | StorageSequencer | ValueSequencer


_BACKLOG = 64  # notifications held for a subscriber whose id is not sent yet


@dataclass(slots=True)
class Subscriber:
    """One client subscription: its id and how to reach its socket. Until its
    id has been sent (``greet``), notifications wait in ``backlog``: a client
    never sees a notification before the answer that names it."""

    sub_id: str
    send: Callable[[bytes], None]
    owner: object  # the client socket holding it
    ready: bool = False
    backlog: list[bytes] = field(default_factory=list)


def _sequencer(kind: SubKind) -> Sequencer:
    if kind.heads:
        return HeadSequencer(fill_gaps=kind.kind != "all_heads")
    if kind.kind == "storage":
        return StorageSequencer()
    return ValueSequencer()


class SharedSubscription:
    def __init__(
        self,
        key: str,
        network: str,
        kind: SubKind,
        params: list[Any],
        *,
        clock: Callable[[], float],
        call_timeout_s: float,
        on_deliver: Callable[[str, Any], object] | None = None,
    ) -> None:
        self.key = key
        self.network = network
        self.kind = kind
        self.params = params
        self.subscribers: dict[str, Subscriber] = {}
        self.sequencer = _sequencer(kind)
        self.socket: UpstreamSocket | None = None
        self.upstream: Upstream | None = None
        self.upstream_sub: str | None = None
        self.generation = 0
        self.moves = 0  # times it was resubscribed elsewhere
        self.delivered = 0  # notifications delivered (each to every subscriber)
        self.last_at: float | None = None  # clock() of the last notification seen
        self.live = asyncio.Event()  # set while an upstream subscription holds
        self.waiting = 0  # subscribes waiting for a node to take it (``taken``)
        self.linger: asyncio.TimerHandle | None = None
        self.mover: asyncio.Task[None] | None = None
        self._clock = clock
        self._timeout = call_timeout_s
        self._on_deliver = on_deliver  # told each value before clients see it
        self._queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
        self._worker: asyncio.Task[None] | None = None

    async def taken(self, within_s: float) -> bool:
        """Whether a node took it within ``within_s``; its waiters are counted
        meanwhile, so one that gives up never drops it under another."""
        self.waiting += 1
        try:
            async with asyncio.timeout(within_s):
                await self.live.wait()
            return True
        except TimeoutError:
            return False
        finally:
            self.waiting -= 1

    def start(self) -> None:
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._work())

    async def attach(self, socket: UpstreamSocket, upstream: Upstream) -> None:
        """Subscribe on ``socket``; from now on only its notifications count."""
        self.generation += 1
        gen = self.generation
        sub = await socket.subscribe(
            self.kind.subscribe,
            self.params,
            lambda result: self._queue.put_nowait((gen, result)),
            self._timeout,
        )
        if gen != self.generation:  # superseded while waiting (stopped or moved again)
            socket.forget(sub)
            return
        self.socket, self.upstream, self.upstream_sub = socket, upstream, sub
        self.last_at = self._clock()
        self.live.set()

    def detach(self) -> tuple[UpstreamSocket | None, str | None]:
        """Leave the current upstream (its later notifications are dropped)."""
        self.generation += 1
        socket, sub = self.socket, self.upstream_sub
        if socket is not None and sub is not None:
            socket.forget(sub)
        self.socket = self.upstream = self.upstream_sub = None
        self.live.clear()
        return socket, sub

    def current(self) -> Any:
        return self.sequencer.current()

    def greet(self, subscriber: Subscriber) -> None:
        """Its id has been sent: a new subscriber gets the current value at once,
        as from a node (or, when notifications came meanwhile, those)."""
        subscriber.ready = True
        backlog, subscriber.backlog = subscriber.backlog, []
        if backlog:
            for frame in backlog:
                subscriber.send(frame)
            return
        value = self.current()
        if value is not None:
            encoded = dumps_text(value)
            subscriber.send(self._frame(subscriber.sub_id, encoded))

    def _frame(self, sub_id: str, result_json: str) -> bytes:
        # The result is encoded once per notification, not once per subscriber.
        return (
            f'{{"jsonrpc":"2.0","method":"{self.kind.notification}",'
            f'"params":{{"subscription":{dumps_text(sub_id)},"result":{result_json}}}}}'
        ).encode()

    def _deliver(self, result: Any) -> None:
        if self._on_deliver is not None:
            self._on_deliver(self.network, result)  # a head is known before it is shown
        self.sequencer.delivered(result)
        self.delivered += 1
        encoded = dumps_text(result)
        for sub in list(self.subscribers.values()):
            try:
                frame = self._frame(sub.sub_id, encoded)
                if sub.ready:
                    sub.send(frame)
                elif len(sub.backlog) < _BACKLOG:
                    sub.backlog.append(frame)
            except Exception:  # one client's socket must not stop the others
                log.exception("notification to subscription %s failed", sub.sub_id)

    async def _work(self) -> None:
        while True:
            gen, result = await self._queue.get()
            if gen != self.generation:
                continue  # from a node this subscription has left
            self.last_at = self._clock()
            step: Step = self.sequencer.consider(result)
            if step.action == "drop":
                continue
            if step.action == "fill":
                await self._fill(step.fill, gen)
                if gen != self.generation:
                    continue
                if self.sequencer.consider(result).action == "drop":
                    continue
            self._deliver(result)

    async def _fill(self, heights: tuple[int, ...], gen: int) -> None:
        """Fetch and deliver the headers a node change made us miss, in order."""
        socket = self.socket
        for n in heights:
            if socket is None or gen != self.generation:
                return
            header = await self._header_at(socket, n)
            if header is None:
                log.warning(
                    "%s %s: block %d could not be fetched from %s: gap not filled",
                    self.network,
                    self.kind.subscribe,
                    n,
                    socket.endpoint_id,
                )
                return
            if self.sequencer.consider(header).action != "drop":
                self._deliver(header)

    async def _header_at(self, socket: UpstreamSocket, n: int) -> Any:
        try:
            block_hash = await socket.call("chain_getBlockHash", [n], self._timeout)
            if not isinstance(block_hash, str):
                return None
            header = await socket.call("chain_getHeader", [block_hash], self._timeout)
        except UpstreamError:
            return None
        return header if isinstance(header, dict) else None

    async def stop(
        self, unsubscribe: Callable[[UpstreamSocket, str, str], Awaitable[None]]
    ) -> None:
        if self.linger is not None:
            self.linger.cancel()
        for task in (self.mover, self._worker):
            if task is not None:
                task.cancel()
        socket, sub = self.detach()
        if socket is not None and sub is not None:
            await unsubscribe(socket, sub, self.kind.unsubscribe)
