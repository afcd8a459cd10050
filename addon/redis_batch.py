"""Every Redis command of this process goes out in pipelines over one
connection: the commands queued while the previous pipeline was in flight go
together in the next (one write, one read, however many requests wait).

Why not a connection per request (redis-py's pool): a burst of calls opens a
connection each (100 by default, then ``MaxConnectionsError``), and a request
that gives up waiting cancels a read half-way on a shared connection. Here a
request waits on a future of its own; giving up cancels only that future, and
the connection's I/O belongs to one task that always reads its replies.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from typing import Any

from redis import exceptions as redis_errors

log = logging.getLogger("chainproxy.redis")

MAX_BATCH = 512  # commands in one pipeline; the rest go in the next


class Batcher:
    def __init__(self, client: Any) -> None:
        self.client = client
        self._queue: list[tuple[tuple[Any, ...], asyncio.Future[Any]]] = []
        self._task: asyncio.Task[None] | None = None
        self._scripts: dict[str, str] = {}  # sha -> source, for NOSCRIPT after a restart

    def script(self, source: str) -> str:
        """Register a Lua script; its SHA1 for ``evalsha``."""
        sha = hashlib.sha1(source.encode()).hexdigest()
        self._scripts[sha] = source
        return sha

    def submit(self, *command: Any) -> asyncio.Future[Any]:
        """Queue one command; its reply (or the exception) arrives on the future."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((command, fut))
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._drain())
        return fut

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
        for _, fut in self._queue:
            fut.cancel()
        self._queue.clear()

    async def _drain(self) -> None:
        while self._queue:
            batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
            live = [(cmd, fut) for cmd, fut in batch if not fut.done()]  # gave up already
            if not live:
                continue
            try:
                replies = await self._execute([cmd for cmd, _ in live])
            except Exception as e:  # the connection failed: every waiter hears it
                for _, fut in live:
                    if not fut.done():
                        fut.set_exception(e)
                continue
            for (_, fut), reply in zip(live, replies, strict=True):
                if fut.done():
                    continue
                if isinstance(reply, Exception):
                    fut.set_exception(reply)
                else:
                    fut.set_result(reply)

    async def _execute(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        replies = await self._pipeline(commands)
        # A restarted Redis has forgotten our scripts: load them, send those again.
        again = [
            i
            for i, r in enumerate(replies)
            if isinstance(r, redis_errors.NoScriptError)
            or (isinstance(r, redis_errors.ResponseError) and str(r).startswith("NOSCRIPT"))
        ]
        if again:
            for sha in {commands[i][1] for i in again}:
                await self.client.script_load(self._scripts[sha])
            retried = await self._pipeline([commands[i] for i in again])
            for i, r in zip(again, retried, strict=True):
                replies[i] = r
        return replies

    async def _pipeline(self, commands: list[tuple[Any, ...]]) -> list[Any]:
        pipe = self.client.pipeline(transaction=False)
        for cmd in commands:
            pipe.execute_command(*cmd)
        return list(await pipe.execute(raise_on_error=False))
