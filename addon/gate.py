"""The pipeline's first step: route by path, enforce the body limit, parse.

Returns the call's ``RpcContext`` (with the flow already answered when the
body was refused), or None when the flow is not a call on a known network (a
route refusal, a CORS preflight) or not an RPC call at all (a sidecar path,
marked for ``SidecarPassthrough``)."""

from __future__ import annotations

from typing import Any

from mitmproxy import http

from addon.context import SIDECAR_PATH_KEY, WS_CALL_KEY, RpcContext
from addon.jsonrpc import BadItem, Refusal, error_obj, parse_body
from addon.paths import Preflight, RpcRoute, SidecarRoute, classify
from addon.ratelimit import client_identity
from addon.respond import finish, make_headers, refusal_response
from addon.runtime import Runtime

_PREFLIGHT_HEADERS = (
    ("Access-Control-Allow-Methods", "POST, OPTIONS"),
    ("Access-Control-Allow-Headers", "Content-Type"),
    ("Access-Control-Max-Age", "86400"),
)


def open_rpc(flow: http.HTTPFlow, rt: Runtime) -> RpcContext | None:
    route = classify(flow.request.method, flow.request.path, rt.config.proxy.networks)
    if isinstance(route, SidecarRoute):
        flow.metadata[SIDECAR_PATH_KEY] = route.path
        return None
    if isinstance(route, Refusal):
        finish(flow, refusal_response(route), None, now=rt.clock(), outcome="refused")
        return None
    if isinstance(route, Preflight):
        flow.response = http.Response.make(204, b"", make_headers(_PREFLIGHT_HEADERS))
        return None
    return _parse(flow, rt, route)


def _parse(flow: http.HTTPFlow, rt: Runtime, route: RpcRoute) -> RpcContext | None:
    p = rt.config.proxy
    peer = flow.client_conn.peername[0] if flow.client_conn.peername else "unknown"
    rpc = RpcContext(
        network=route.network,
        started=rt.clock(),
        client=client_identity(
            peer,
            flow.request.headers.get("X-Forwarded-For"),
            p.trusted_proxies,
            ipv6_prefix=p.rate_limit.ipv6_prefix,
        ),
        websocket=WS_CALL_KEY in flow.metadata,
    )
    body = flow.request.raw_content or b""
    if len(body) > p.max_body_bytes:
        parsed: Any = Refusal(
            413,
            -32600,
            f"body too large: {len(body)} bytes, the limit is {p.max_body_bytes}",
            data={"limit": p.max_body_bytes},
        )
    else:
        parsed = parse_body(body, max_batch=p.max_batch)
    if isinstance(parsed, Refusal):
        finish(flow, refusal_response(parsed), rpc, now=rt.clock(), outcome="refused")
        return rpc  # answered: counted in the live metrics, no step runs
    rpc.parsed = parsed
    rpc.answers = [
        error_obj(i.id, i.code, i.message) if isinstance(i, BadItem) else None for i in parsed.items
    ]
    return rpc
