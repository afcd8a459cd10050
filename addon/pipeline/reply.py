"""Turning a finished call into what its client receives, in one place
(the response itself is built by ``addon/mitm/responses.py``).

``deliver`` answers a POST: the HTTP response (status, body, quota and
``X-Chainproxy-*`` headers), a plain (serialisable) summary in
``flow.metadata["chainproxy"]``, a one-line ``flow.comment`` and a
``flow.marked`` badge for failovers and errors, so a developer in mitmweb sees
at a glance where each call went. ``message_body`` is the same answer as one
WebSocket message (the JSON-RPC body alone: the error inside says it all).
"""

from __future__ import annotations

from mitmproxy import http

from addon.mitm.responses import add_headers, json_response, wire
from addon.pipeline.context import META_KEY, RpcContext
from addon.rpc.jsonrpc import INTERNAL_ERROR, dumps, error_obj

_INTERNAL = dumps(error_obj(None, INTERNAL_ERROR, "internal proxy error"))


def deliver(flow: http.HTTPFlow, rpc: RpcContext, now: float) -> None:
    """Answer a POST with its call's reply (none: the client went away)."""
    reply = rpc.reply
    if reply is None or not flow.live:
        return
    response = json_response(reply.status, reply.doc, reply.headers)
    finish(flow, response, rpc, now=now, outcome=reply.outcome)


def http_answer(rpc: RpcContext, *, close: bool = False) -> bytes | None:
    """The bytes of the HTTP response ``deliver`` gives mitmproxy for this
    call, as mitmproxy would send them (the direct HTTP reads write them);
    ``close``: with ``Connection: close`` (a drain). None when the client went
    away."""
    reply = rpc.reply
    if reply is None:
        return None
    response = json_response(reply.status, reply.doc, reply.headers)
    _contract_headers(response, rpc)
    if close:
        response.headers["Connection"] = "close"
    return wire(response)


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
    if rpc is not None:
        _contract_headers(response, rpc)
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


def _contract_headers(response: http.Response, rpc: RpcContext) -> None:
    """The quota's headers and the request id, on every answer to a call."""
    if rpc.rate is not None:
        add_headers(response, rpc.rate.headers())
    if rpc.request_id:
        response.headers["X-Request-Id"] = rpc.request_id


def _comment(
    rpc: RpcContext, methods: list[str], latency_ms: int, outcome: str, status: int
) -> str:
    shown = ", ".join(methods[:3]) + (f" +{len(methods) - 3}" if len(methods) > 3 else "")
    parts = [f"#{rpc.request_id} {rpc.network} {shown or '-'}"]
    if rpc.upstream:  # "method → node", one part
        parts[0] += f" → {rpc.provider} {rpc.upstream}"
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
