"""One WebSocket to one node: JSON-RPC calls matched by id, and notifications
routed to the handler of their subscription id.

A subscription's handler is registered by the reader itself, when it reads
the answer to the subscribe call, so a notification that follows that answer
at once (a node sends the current head right away) is never missed. A
notification that comes *before* that answer (chopsticks sends a runtime
version subscription's first value so) is kept while a subscribe call is
pending and handed to the handler when the answer names its id.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import Callable
from typing import Any

import aiohttp

from common.jsontext import loads

log = logging.getLogger("chainproxy.subs")

Handler = Callable[[Any], None]  # called with each notification's result

_MAX_MESSAGE = 16 * 1_048_576
_MAX_EARLY = 64  # notifications kept for ids no answer has named yet


class UpstreamError(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UpstreamSocket:
    def __init__(
        self,
        endpoint_id: str,
        url: str,
        *,
        on_close: Callable[[UpstreamSocket, str], None],
    ) -> None:
        self.endpoint_id = endpoint_id
        self.url = url
        self._on_close = on_close
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, tuple[asyncio.Future[Any], Handler | None]] = {}
        self._handlers: dict[str, Handler] = {}
        self._early: list[tuple[str, Any]] = []  # (subscription id, result) before its answer
        self._reader: asyncio.Task[None] | None = None
        self.closed = False
        self.close_reason = ""

    def __len__(self) -> int:
        """Live subscriptions on this socket."""
        return len(self._handlers)

    async def connect(self, session: aiohttp.ClientSession, timeout: float) -> None:
        try:
            async with asyncio.timeout(timeout):
                self._ws = await session.ws_connect(
                    self.url, autoping=True, heartbeat=20, max_msg_size=_MAX_MESSAGE
                )
        except TimeoutError:
            raise UpstreamError("timeout") from None
        except (aiohttp.ClientError, OSError) as e:
            raise UpstreamError(f"connect-error:{type(e).__name__}") from None
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def call(self, method: str, params: Any, timeout: float) -> Any:
        return await self._request(method, params, timeout, None)

    async def subscribe(self, method: str, params: Any, handler: Handler, timeout: float) -> str:
        """The node's subscription id; ``handler`` gets every notification."""
        sub_id = await self._request(method, params, timeout, handler)
        return str(sub_id)

    async def unsubscribe(self, method: str, sub_id: str, timeout: float = 5.0) -> None:
        self._handlers.pop(sub_id, None)
        if self.closed:
            return
        with contextlib.suppress(UpstreamError):
            await self._request(method, [sub_id], timeout, None)

    def forget(self, sub_id: str) -> None:
        """Stop routing a subscription's notifications (its node is left alone)."""
        self._handlers.pop(sub_id, None)

    def listen(self, sub_id: str, handler: Handler) -> None:
        """Route a live subscription's notifications to ``handler`` from now on
        (the canary on a silent socket: ``addon/subs/silence.py``)."""
        if not self.closed:
            self._handlers[sub_id] = handler

    async def _request(
        self, method: str, params: Any, timeout: float, handler: Handler | None
    ) -> Any:
        if self.closed or self._ws is None:
            raise UpstreamError("closed")
        call_id = next(self._ids)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[call_id] = (fut, handler)
        try:
            async with asyncio.timeout(timeout):
                await self._ws.send_str(
                    json.dumps(
                        {"jsonrpc": "2.0", "id": call_id, "method": method, "params": params}
                    )
                )
                return await fut
        except TimeoutError:
            raise UpstreamError("timeout") from None
        except (aiohttp.ClientError, ConnectionError, RuntimeError) as e:
            raise UpstreamError(f"send-error:{type(e).__name__}") from None
        finally:
            self._pending.pop(call_id, None)
            if self._early and not self._subscribing():
                self._early.clear()  # no answer can name their ids any more

    def _subscribing(self) -> bool:
        return any(handler is not None for _, handler in self._pending.values())

    async def _read(self) -> None:
        reason = "closed"
        assert self._ws is not None
        try:
            async for msg in self._ws:
                if msg.type == aiohttp.WSMsgType.TEXT:
                    self._dispatch(msg.data)
                elif msg.type == aiohttp.WSMsgType.BINARY:
                    self._dispatch(msg.data.decode("utf-8", "replace"))
                elif msg.type == aiohttp.WSMsgType.ERROR:
                    reason = "error"
                    break
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                reason = "cancelled"
                raise
            # aiohttp cancels its own read when the connection is lost
            reason = "connection-lost"
        except Exception as e:  # the socket is gone whatever broke
            reason = f"read-error:{type(e).__name__}"
        finally:
            self._finish(reason)

    def _dispatch(self, text: str) -> None:
        try:
            doc = loads(text)
        except ValueError:
            log.warning("%s sent a message that is not JSON", self.endpoint_id)
            return
        for obj in doc if isinstance(doc, list) else [doc]:
            if not isinstance(obj, dict):
                continue
            if "id" in obj and obj.get("method") is None:
                self._answer(obj)
                continue
            params = obj.get("params")
            if isinstance(params, dict) and "subscription" in params:
                sub_id = str(params["subscription"])
                handler = self._handlers.get(sub_id)
                if handler is not None:
                    self._notify(handler, params.get("result"))
                elif self._subscribing() and len(self._early) < _MAX_EARLY:
                    self._early.append((sub_id, params.get("result")))

    def _notify(self, handler: Handler, result: Any) -> None:
        try:
            handler(result)
        except Exception:  # one subscription's bug must not end the socket
            log.exception("subscription handler failed on %s", self.endpoint_id)

    def _answer(self, obj: dict[str, Any]) -> None:
        entry = self._pending.get(obj["id"]) if isinstance(obj["id"], int) else None
        if entry is None:
            return
        fut, handler = entry
        if fut.done():
            return
        if "error" in obj:
            err = obj["error"]
            message = err.get("message", "") if isinstance(err, dict) else str(err)
            fut.set_exception(UpstreamError(f"rpc-error:{str(message)[:120]}"))
            return
        result = obj.get("result")
        if handler is not None:
            if not isinstance(result, str | int):
                fut.set_exception(UpstreamError("bad-subscription-id"))
                return
            sub_id = str(result)
            self._handlers[sub_id] = handler  # before any later message is read
            early = [r for i, r in self._early if i == sub_id]
            self._early = [(i, r) for i, r in self._early if i != sub_id]
            for r in early:
                self._notify(handler, r)
        fut.set_result(result)

    def _finish(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        self.close_reason = reason
        for fut, _ in list(self._pending.values()):
            if not fut.done():
                fut.set_exception(UpstreamError(reason))
        self._handlers.clear()
        self._on_close(self, reason)

    async def close(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            with contextlib.suppress(Exception):
                await ws.close()
        if self._reader is not None:
            self._reader.cancel()
        self._finish("closed-by-proxy")
