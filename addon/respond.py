"""Turning decisions into HTTP responses and mitmweb annotations.

Every RPC flow ends here: ``finish`` sets the response, writes a plain
(serialisable) summary to ``flow.metadata["chainproxy"]``, a one-line
``flow.comment`` and a ``flow.marked`` badge for failovers and errors, so a
developer in mitmweb sees at a glance where each call went.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from mitmproxy import http
from mitmproxy.net.http import status_codes

from addon.forward import Attempt
from addon.jsonrpc import Parsed, Refusal, dumps, error_obj
from addon.ratelimit import Decision

CTX_KEY = "chainproxy.ctx"
META_KEY = "chainproxy"
WS_KEY = "chainproxy.websocket"  # on a WebSocket handshake flow: its network
WS_CALL_KEY = "chainproxy.ws_call"  # on the internal flow of one WebSocket message

CORS_HEADERS = (
    ("Access-Control-Allow-Origin", "*"),
    (
        "Access-Control-Expose-Headers",
        "X-Cache, X-RateLimit-Limit, X-RateLimit-Remaining, "
        "X-RateLimit-Reset, X-RateLimit-Policy, Retry-After, X-Chainproxy-Upstream, "
        "X-Chainproxy-Attempts",
    ),
)


@dataclass(slots=True)
class RpcContext:
    """One RPC flow's state while it moves through the stages."""

    network: str
    started: float
    parsed: Parsed | None = None
    client: str = ""
    answers: list[dict[str, Any] | None] = field(default_factory=list)  # per item
    rate: Decision | None = None
    attempts: tuple[Attempt, ...] = ()
    upstream: str | None = None
    provider: str | None = None
    cache: str = "MISS"
    hits: set[int] = field(default_factory=set)  # items answered from the cache
    forwarded: list[int] = field(default_factory=list)  # items sent upstream

    def pending(self) -> list[int]:
        """Indexes of the items that still need an upstream answer."""
        return [i for i, a in enumerate(self.answers) if a is None]


_CORS_FIELDS = tuple((k.encode(), v.encode()) for k, v in CORS_HEADERS)
_JSON_CT = (b"Content-Type", b"application/json")
_REASONS: dict[int, bytes] = {}


def _reason(status: int) -> bytes:
    reason = _REASONS.get(status)
    if reason is None:
        reason = _REASONS[status] = status_codes.RESPONSES.get(status, "").encode()
    return reason


def _response_make(
    status: int, body: bytes, fields: tuple[tuple[bytes, bytes], ...]
) -> http.Response:
    return http.Response.make(status, body, http.Headers(fields))


def _response_direct(
    status: int, body: bytes, fields: tuple[tuple[bytes, bytes], ...]
) -> http.Response:
    """What ``Response.make`` builds (same fields, same ``content-length``), without
    its per-object type check (``MessageData.__post_init__``, ~50 µs: a third of
    the addon's own CPU per request). The types are ours and fixed; the result is
    compared with ``Response.make``'s once at import, see ``_pick_builder``."""
    now = time.time()
    data = object.__new__(http.ResponseData)
    data.__dict__.update(
        http_version=b"HTTP/1.1",
        headers=http.Headers((*fields, (b"content-length", str(len(body)).encode()))),
        content=body,
        trailers=None,
        timestamp_start=now,
        timestamp_end=now,
        status_code=status,
        reason=_reason(status),
    )
    response = object.__new__(http.Response)
    response.data = data
    return response


def _pick_builder():  # type: ignore[no-untyped-def]
    """The direct builder if it yields exactly what ``Response.make`` does on this
    mitmproxy version, else ``Response.make`` itself."""
    try:
        fields = (_JSON_CT, (b"X-Cache", b"MISS"), *_CORS_FIELDS)
        for status, body in ((200, b'{"a":1}'), (429, b""), (599, b"x")):
            made, direct = (
                _response_make(status, body, fields),
                _response_direct(status, body, fields),
            )
            if vars(made).keys() != vars(direct).keys() or type(made.data) is not type(direct.data):
                return _response_make
            if vars(made.data).keys() != vars(direct.data).keys():
                return _response_make
            a, b = made.get_state(), direct.get_state()
            for state in (a, b):
                state.pop("timestamp_start"), state.pop("timestamp_end")
            if a != b:
                return _response_make
    except Exception:
        return _response_make
    return _response_direct


_build_response = _pick_builder()


def json_response(status: int, doc: Any, headers: Iterable[tuple[str, str]] = ()) -> http.Response:
    return _build_response(
        status,
        dumps(doc),
        (_JSON_CT, *((k.encode(), v.encode()) for k, v in headers), *_CORS_FIELDS),
    )


def make_headers(pairs: Iterable[tuple[str, str]]) -> http.Headers:
    """mitmproxy wants bytes; every chainproxy answer also carries CORS headers
    so browser clients (polkadot.js in a page) can read it."""
    return http.Headers((*((k.encode(), v.encode()) for k, v in pairs), *_CORS_FIELDS))


def _add_headers(response: http.Response, pairs: Iterable[tuple[str, str]]) -> None:
    """``response.headers[k] = v`` for each pair, with one rebuild of the fields
    instead of one scan and rebuild per header."""
    headers = response.headers
    present = {k.lower() for k, _ in headers.fields}
    new = []
    for k, v in pairs:
        if k.lower().encode() in present:
            headers[k] = v
        else:
            new.append((k.encode(), v.encode()))
    if new:
        headers.fields = (*headers.fields, *new)


def refusal_response(r: Refusal, extra: Iterable[tuple[str, str]] = ()) -> http.Response:
    return json_response(r.status, error_obj(r.id, r.code, r.message, r.data), [*r.headers, *extra])


def finish(
    flow: http.HTTPFlow,
    response: http.Response,
    rpc: RpcContext | None,
    *,
    now: float,
    outcome: str,
) -> None:
    """Answer the flow and annotate it for mitmweb (metadata, comment, marked)."""
    if rpc is not None and rpc.rate is not None:
        _add_headers(response, rpc.rate.headers())
    flow.response = response
    flow.metadata.pop(CTX_KEY, None)
    if rpc is None:
        return
    methods = [c.method for c in rpc.parsed.calls] if rpc.parsed else []
    latency_ms = round((now - rpc.started) * 1000)
    flow.metadata[META_KEY] = {
        "network": rpc.network,
        "methods": methods,
        "client": rpc.client,
        "upstream": rpc.upstream,
        "provider": rpc.provider,
        "attempts": [a.as_dict() for a in rpc.attempts],
        "failover": len(rpc.attempts) > 1,
        "cache": rpc.cache,
        "latency_ms": latency_ms,
        "outcome": outcome,
        "status": response.status_code,
    }
    flow.comment = _comment(rpc, methods, latency_ms, outcome, response.status_code)
    if outcome != "ok":
        flow.marked = ":no_entry:" if outcome == "refused" else ":x:"
    elif len(rpc.attempts) > 1:
        flow.marked = ":repeat:"


def _comment(
    rpc: RpcContext, methods: list[str], latency_ms: int, outcome: str, status: int
) -> str:
    shown = ", ".join(methods[:3]) + (f" +{len(methods) - 3}" if len(methods) > 3 else "")
    parts = [f"{rpc.network} {shown or '-'}"]
    if rpc.upstream:
        parts.append(f"→ {rpc.provider} {rpc.upstream}")
    if rpc.attempts:
        trail = " → ".join(f"{a.endpoint[-6:]}:{a.reason or 'ok'}" for a in rpc.attempts)
        parts.append(f"{len(rpc.attempts)} attempt{'s' * (len(rpc.attempts) > 1)} ({trail})")
    parts.append(f"{latency_ms} ms")
    parts.append(rpc.cache)
    if outcome != "ok":
        parts.append(f"{outcome} {status}")
    return " · ".join(parts)
