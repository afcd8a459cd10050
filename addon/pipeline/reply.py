"""Turning a finished call into what its client receives, in one place.

``deliver`` answers a POST: the HTTP response (status, body, quota and
``X-Chainproxy-*`` headers), a plain (serialisable) summary in
``flow.metadata["chainproxy"]``, a one-line ``flow.comment`` and a
``flow.marked`` badge for failovers and errors, so a developer in mitmweb sees
at a glance where each call went. ``message_body`` is the same answer as one
WebSocket message (the JSON-RPC body alone: the error inside says it all).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mitmproxy import http

from addon.mitm import internals as mitm_internals
from addon.pipeline.context import META_KEY, RpcContext
from addon.rpc.jsonrpc import INTERNAL_ERROR, Refusal, dumps, error_obj

CORS_HEADERS = (
    ("Access-Control-Allow-Origin", "*"),
    (
        "Access-Control-Expose-Headers",
        "X-Cache, X-RateLimit-Limit, X-RateLimit-Remaining, "
        "X-RateLimit-Reset, X-RateLimit-Policy, Retry-After, X-Chainproxy-Upstream, "
        "X-Chainproxy-Attempts, X-Request-Id, x-metagraph-rpc-endpoint-id, "
        "x-metagraph-rpc-provider, x-metagraph-rpc-attempts, x-metagraph-rpc-cache",
    ),
)


_CORS_FIELDS = tuple((k.encode(), v.encode()) for k, v in CORS_HEADERS)
_JSON_CT = (b"Content-Type", b"application/json")
_build_response = mitm_internals.response_builder()


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


_INTERNAL = dumps(error_obj(None, INTERNAL_ERROR, "internal proxy error"))


def deliver(flow: http.HTTPFlow, rpc: RpcContext, now: float) -> None:
    """Answer a POST with its call's reply (none: the client went away)."""
    reply = rpc.reply
    if reply is None or not flow.live:
        return
    response = json_response(reply.status, reply.doc, reply.headers)
    finish(flow, response, rpc, now=now, outcome=reply.outcome)


def message_body(rpc: RpcContext) -> bytes:
    """The WebSocket message answering a call."""
    return dumps(rpc.reply.doc) if rpc.reply is not None else _INTERNAL


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
    if rpc is not None and rpc.request_id:
        response.headers["X-Request-Id"] = rpc.request_id
    flow.response = response
    if rpc is None:
        return
    methods = [c.method for c in rpc.parsed.calls] if rpc.parsed else []
    latency_ms = round(rpc.stop(now) * 1000)
    flow.metadata[META_KEY] = {
        "network": rpc.network,
        "methods": methods,
        "client": rpc.client,
        "upstream": rpc.upstream,
        "provider": rpc.provider,
        "attempts": [a.as_dict() for a in rpc.attempts],
        "failover": rpc.failover,
        "cache": rpc.cache,
        "pinned": rpc.pinned,
        "coalesced": rpc.coalesced,
        "hedged": rpc.hedged,
        "latency_ms": latency_ms,
        "outcome": outcome,
        "status": response.status_code,
    }
    flow.comment = _comment(rpc, methods, latency_ms, outcome, response.status_code)
    if outcome != "ok":
        flow.marked = ":no_entry:" if outcome == "refused" else ":x:"
    elif rpc.failover:
        flow.marked = ":repeat:"


def _comment(
    rpc: RpcContext, methods: list[str], latency_ms: int, outcome: str, status: int
) -> str:
    shown = ", ".join(methods[:3]) + (f" +{len(methods) - 3}" if len(methods) > 3 else "")
    parts = [f"#{rpc.request_id} {rpc.network} {shown or '-'}"]
    if rpc.upstream:
        parts.append(f"→ {rpc.provider} {rpc.upstream}")
    if rpc.attempts:
        trail = " → ".join(f"{a.endpoint[-6:]}:{a.reason or 'ok'}" for a in rpc.attempts)
        parts.append(f"{len(rpc.attempts)} attempt{'s' * (len(rpc.attempts) > 1)} ({trail})")
    parts.append(f"{latency_ms} ms")
    parts.append(rpc.cache)
    parts.extend(
        word
        for word, on in (
            ("PINNED", rpc.pinned),
            ("PIN-MISSED", rpc.pin_missed),
            ("COALESCED", rpc.coalesced),
            ("HEDGED", rpc.hedged),
        )
        if on
    )
    if outcome != "ok":
        parts.append(f"{outcome} {status}")
    return " · ".join(parts)
