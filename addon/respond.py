"""Turning decisions into HTTP responses and mitmweb annotations.

Every RPC flow ends here: ``finish`` sets the response, writes a plain
(serialisable) summary to ``flow.metadata["chainproxy"]``, a one-line
``flow.comment`` and a ``flow.marked`` badge for failovers and errors, so a
developer in mitmweb sees at a glance where each call went.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from mitmproxy import http

from addon.forward import Attempt
from addon.jsonrpc import Parsed, Refusal, dumps, error_obj
from addon.ratelimit import Decision

CTX_KEY = "chainproxy.ctx"
META_KEY = "chainproxy"

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


def json_response(status: int, doc: Any, headers: Iterable[tuple[str, str]] = ()) -> http.Response:
    return http.Response.make(
        status, dumps(doc), make_headers([("Content-Type", "application/json"), *headers])
    )


def make_headers(pairs: Iterable[tuple[str, str]]) -> http.Headers:
    """mitmproxy wants bytes; every chainproxy answer also carries CORS headers
    so browser clients (polkadot.js in a page) can read it."""
    return http.Headers([(k.encode(), v.encode()) for k, v in (*pairs, *CORS_HEADERS)])


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
        for k, v in rpc.rate.headers():
            response.headers[k] = v
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
