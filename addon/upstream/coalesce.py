"""Identical reads in flight at the same time share one upstream call.

The key is the network and the outbound request itself (method and params,
after head pinning, so the pinned block is part of it); ids are not in it:
each caller's answer gets its own id when the pending slots are filled. Every
call is a read here (the allowlist refuses writes), so sharing is always safe,
cacheable or not (``chain_getHeader``, ``system_health``). Bounded: past
``max_keys`` distinct calls in flight a new one simply goes alone.

The caller that starts a call runs it in its own task (no task of its own:
most calls are never joined) and publishes the ``ForwardResult`` to the
callers that joined it, failover included, through a future made when the
first of them joins. A joiner that goes away (a closed connection cancels its
flow) cancels nobody. If the starter goes away, its call goes with it (it ran
in the starter's task): the joiners then send the call again themselves, the
first of them as the new starter, the others joining it. The key leaves when
the starter resumes, in the same step as it stores the answer in the edge
cache, so no identical call can go upstream in between.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from addon.rpc.jsonrpc import Call, dumps
from addon.upstream.forward import ForwardResult


def coalesce_key(network: str, calls: Sequence[Call], is_batch: bool) -> bytes:
    """The identity of an outbound request, without ids (a batch is keyed whole)."""
    body: Any = (
        [[c.method, c.params] for c in calls] if is_batch else [calls[0].method, calls[0].params]
    )
    return network.encode() + b"\x00" + dumps(body)


class _StarterLeft(Exception):
    """The call's starter was cancelled, and its call with it: send it again."""


class _Shared:
    """A call in flight; ``future``: its result, for the callers that joined it."""

    __slots__ = ("future",)

    def __init__(self) -> None:
        self.future: asyncio.Future[ForwardResult] | None = None


class Coalescer:
    def __init__(self, max_keys: int = 10_000) -> None:
        self.max_keys = max_keys
        self._inflight: dict[bytes, _Shared] = {}

    def __len__(self) -> int:
        return len(self._inflight)

    async def run(
        self, key: bytes, start: Callable[[], Awaitable[ForwardResult]]
    ) -> tuple[ForwardResult, bool]:
        """The result of the call ``key`` names, and whether it was shared (another
        caller's call already in flight) rather than started here."""
        while True:
            shared = self._inflight.get(key)
            if shared is None:
                break
            if shared.future is None:
                shared.future = asyncio.get_running_loop().create_future()
            try:
                # shielded: a joiner cancelled does not cancel the others' future
                return await asyncio.shield(shared.future), True
            except _StarterLeft:
                continue  # the first joiner to resume starts it again
        if len(self._inflight) >= self.max_keys:
            return await start(), False
        shared = _Shared()
        self._inflight[key] = shared
        try:
            result = await start()
        except BaseException as e:
            self._end(key, shared)
            if shared.future is not None:
                # a failure reaches every joiner; a starter cancelled (or its
                # coroutine closed) hands the call on to them
                gone = not isinstance(e, Exception)
                shared.future.set_exception(_StarterLeft() if gone else e)
                shared.future.exception()  # retrieved, even if every joiner left
            raise
        self._end(key, shared)
        if shared.future is not None:
            shared.future.set_result(result)
        return result, False

    def _end(self, key: bytes, shared: _Shared) -> None:
        if self._inflight.get(key) is shared:
            del self._inflight[key]
