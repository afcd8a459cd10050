"""Identical reads in flight at the same time share one upstream call.

The key is the network and the outbound request itself (method and params,
after head pinning, so the pinned block is part of it); ids are not in it:
each caller's answer gets its own id when the pending slots are filled. The
shared call runs as a task of its own, so a caller that goes away (a closed
connection cancels its flow) never cancels it for the others; they all get
the same ``ForwardResult``, failover included. Every call is a read here (the
allowlist refuses writes), so sharing is always safe, cacheable or not
(``chain_getHeader``, ``system_health``). Bounded: past ``max_keys`` distinct
calls in flight a new one simply goes alone. A call stays shareable until its
starter has stored the answer (the cache answers the next one from there on).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from addon.pipeline.jsonrpc import Call, dumps
from addon.upstream.forward import ForwardResult


def coalesce_key(network: str, calls: Sequence[Call], is_batch: bool) -> bytes:
    """The identity of an outbound request, without ids (a batch is keyed whole)."""
    body: Any = (
        [[c.method, c.params] for c in calls] if is_batch else [calls[0].method, calls[0].params]
    )
    return network.encode() + b"\x00" + dumps(body)


class Coalescer:
    def __init__(self, max_keys: int = 10_000) -> None:
        self.max_keys = max_keys
        self._inflight: dict[bytes, asyncio.Task[ForwardResult]] = {}

    def __len__(self) -> int:
        return len(self._inflight)

    async def run(
        self, key: bytes, start: Callable[[], Awaitable[ForwardResult]]
    ) -> tuple[ForwardResult, bool]:
        """The result of the call ``key`` names, and whether it was shared (another
        caller's call already in flight) rather than started here."""
        task = self._inflight.get(key)
        if task is not None:
            return await asyncio.shield(task), True
        if len(self._inflight) >= self.max_keys:
            return await start(), False
        task = asyncio.ensure_future(start())
        self._inflight[key] = task
        try:
            return await asyncio.shield(task), False
        finally:
            # The starter takes the key out itself when it resumes, in the same
            # step as it stores the answer in the edge cache: a call arriving
            # after the answer but before that joins the finished call instead of
            # going upstream again. A starter that left first: when the call ends.
            if task.done():
                self._done(key, task)
            else:
                task.add_done_callback(lambda t: self._done(key, t))

    def _done(self, key: bytes, task: asyncio.Task[ForwardResult]) -> None:
        if self._inflight.get(key) is task:
            del self._inflight[key]
        if not task.cancelled():
            task.exception()  # retrieved: every waiter has seen it already
