"""Minimal JSON-RPC 2.0 clients for probes: a batch over HTTP POST, or the same
calls over one WebSocket. Both return the replies in call order, matched by id,
and raise ``ProbeFailure`` for answers that are not JSON-RPC."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

from sidecar.probing.probes.base import elapsed_ms
from sidecar.probing.probes.classify import (
    ProbeFailure,
    classify_exception,
    classify_rpc_error,
    classify_status,
    describe_exception,
    describe_rpc_error,
)
from sidecar.probing.results import ABORTED, BAD_RESPONSE, LIVE

# Probe answers are a few kB; anything much larger is not what we asked for.
MAX_ANSWER_BYTES = 1_048_576
_READ_CHUNK = 65_536


@dataclass(frozen=True, slots=True)
class RpcCall:
    method: str
    params: list[Any]


@dataclass(frozen=True, slots=True)
class RpcReply:
    method: str
    result: Any = None
    error: Any = None  # the error object as sent (may lack "code"); None on success

    @property
    def ok(self) -> bool:
        return self.error is None


class RpcTransport(Protocol):
    async def batch(self, calls: Sequence[RpcCall]) -> tuple[list[RpcReply], int]:
        """Replies in call order, and the latency in ms of the first call's reply."""
        ...


def request_doc(call: RpcCall, rid: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": call.method, "params": call.params}


def parse_json(raw: bytes | str, what: str) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise ProbeFailure(BAD_RESPONSE, f"{what} is not JSON") from None


def _reply_entries(doc: Any) -> list[Any]:
    """The reply objects in a parsed answer (one object or a batch array)."""
    if isinstance(doc, list):
        return doc
    if isinstance(doc, dict):
        return [doc]
    raise ProbeFailure(BAD_RESPONSE, "answer is not a JSON-RPC object or array")


def _check_orphan_error(entry: dict[str, Any]) -> None:
    """A reply with ``id: null`` and an error is the server refusing the request
    as a whole (parse error, batch not allowed, rate limit)."""
    if entry.get("id") is None and "error" in entry:
        err = entry["error"]
        raise ProbeFailure(classify_rpc_error(err), f"request refused: {describe_rpc_error(err)}")


def _to_reply(call: RpcCall, entry: dict[str, Any]) -> RpcReply:
    if "error" in entry and entry["error"] is not None:
        return RpcReply(call.method, error=entry["error"])
    if "result" not in entry:
        raise ProbeFailure(BAD_RESPONSE, f"{call.method}: reply has neither result nor error")
    return RpcReply(call.method, result=entry["result"])


def match_replies(calls: Sequence[RpcCall], entries: Sequence[Any]) -> list[RpcReply]:
    """Replies for ids 1..len(calls), in call order; missing ones are a bad answer."""
    by_id: dict[int, dict[str, Any]] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise ProbeFailure(BAD_RESPONSE, "batch answer holds a non-object")
        _check_orphan_error(entry)
        rid = entry.get("id")
        if isinstance(rid, int) and not isinstance(rid, bool):
            by_id.setdefault(rid, entry)
    out = []
    for rid, call in enumerate(calls, 1):
        entry = by_id.get(rid)
        if entry is None:
            raise ProbeFailure(BAD_RESPONSE, f"no answer for {call.method}")
        out.append(_to_reply(call, entry))
    return out


async def read_bounded(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """The body, or ``ProbeFailure`` once it passes ``limit`` bytes (never buffers more)."""
    if resp.content_length is not None and resp.content_length > limit:
        raise ProbeFailure(BAD_RESPONSE, f"answer larger than {limit} bytes")
    buf = bytearray()
    async for chunk in resp.content.iter_chunked(_READ_CHUNK):
        buf += chunk
        if len(buf) > limit:
            raise ProbeFailure(BAD_RESPONSE, f"answer larger than {limit} bytes")
    return bytes(buf)


class HttpRpc:
    """Each ``batch`` is one POST of a JSON-RPC batch array."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self._session = session
        self._url = url

    async def batch(self, calls: Sequence[RpcCall]) -> tuple[list[RpcReply], int]:
        body = [request_doc(c, rid) for rid, c in enumerate(calls, 1)]
        started = time.monotonic()
        # No redirects: the proxy forwards to this URL as configured, so a redirect
        # means the endpoint is not usable as is.
        async with self._session.post(
            self._url,
            json=body,
            allow_redirects=False,
            headers={"Accept": "application/json"},
        ) as resp:
            status = resp.status
            if not 200 <= status < 300:
                cls = classify_status(status)
                raise ProbeFailure(cls if cls != LIVE else f"http-{status}", f"HTTP {status}")
            raw = await read_bounded(resp, MAX_ANSWER_BYTES)
        latency = elapsed_ms(started)
        replies = match_replies(calls, _reply_entries(parse_json(raw, "answer")))
        return replies, latency


class WsRpc:
    """Calls over an open WebSocket: one message per call, replies matched by id
    (other messages, e.g. subscription notifications, are skipped)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._next_id = 1

    async def batch(self, calls: Sequence[RpcCall]) -> tuple[list[RpcReply], int]:
        ids = list(range(self._next_id, self._next_id + len(calls)))
        self._next_id += len(calls)
        started = time.monotonic()
        try:
            for rid, call in zip(ids, calls, strict=True):
                await self._ws.send_str(json.dumps(request_doc(call, rid)))
        except (ConnectionError, aiohttp.ClientConnectionError):
            raise ProbeFailure(ABORTED, "WebSocket closed while sending") from None
        wanted = set(ids)
        got: dict[int, dict[str, Any]] = {}
        latency: int | None = None
        while wanted - got.keys():
            for entry in await self._receive_entries():
                if not isinstance(entry, dict):
                    raise ProbeFailure(BAD_RESPONSE, "WebSocket message holds a non-object")
                _check_orphan_error(entry)
                reply_id = entry.get("id")
                if isinstance(reply_id, int) and reply_id in wanted and reply_id not in got:
                    got[reply_id] = entry
                    if reply_id == ids[0]:
                        latency = elapsed_ms(started)
        replies = [_to_reply(call, got[rid]) for rid, call in zip(ids, calls, strict=True)]
        return replies, latency if latency is not None else elapsed_ms(started)

    async def _receive_entries(self) -> list[Any]:
        """JSON-RPC objects from the next data message."""
        while True:
            msg = await self._ws.receive()
            if msg.type is aiohttp.WSMsgType.TEXT or msg.type is aiohttp.WSMsgType.BINARY:
                return _reply_entries(parse_json(msg.data, "WebSocket message"))
            if msg.type is aiohttp.WSMsgType.ERROR:
                exc = self._ws.exception()
                if exc is None or isinstance(exc, aiohttp.WebSocketError):
                    # protocol violation or a message over max_msg_size
                    raise ProbeFailure(BAD_RESPONSE, "WebSocket protocol error")
                raise ProbeFailure(classify_exception(exc), describe_exception(exc))
            if msg.type in (
                aiohttp.WSMsgType.CLOSE,
                aiohttp.WSMsgType.CLOSING,
                aiohttp.WSMsgType.CLOSED,
            ):
                code = self._ws.close_code
                raise ProbeFailure(ABORTED, f"WebSocket closed before all answers (code {code})")
            # PING/PONG are handled by aiohttp (autoping); nothing else is expected.
