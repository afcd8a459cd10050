"""Where a call enters: route by path (a POST), enforce the body limit, parse.

``open_rpc`` takes a POST: it returns the call's ``RpcContext`` (already
answered when the body was refused), or None when the flow is not a call on a
known network (a route refusal, a CORS preflight) or not an RPC call at all (a
sidecar path, marked for ``SidecarPassthrough``). ``open_message`` takes one
WebSocket message: its route and its client were settled at the handshake."""

from __future__ import annotations

from mitmproxy import http

from addon.pipeline.context import SIDECAR_PATH_KEY, Origin, Reply, RpcContext, Socket
from addon.pipeline.jsonrpc import BadItem, Refusal, error_obj, parse_body
from addon.pipeline.paths import Preflight, SidecarRoute, classify
from addon.pipeline.reply import finish, make_headers, refusal_response
from addon.quota.local import client_identity
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
    return _parse(
        RpcContext(route.network, rt.clock(), flow, client=flow_client(flow, rt)),
        flow.request.raw_content or b"",
        rt,
    )


def open_message(content: bytes, sock: Socket, origin: Origin, rt: Runtime) -> RpcContext:
    return _parse(
        RpcContext(sock.network, rt.clock(), origin, client=sock.client, socket=sock), content, rt
    )


def flow_client(flow: http.HTTPFlow, rt: Runtime) -> str:
    """The quota identity of a flow's client: its address, or the one a trusted
    proxy in front of us names in ``X-Forwarded-For``."""
    p = rt.config.proxy
    peer = flow.client_conn.peername[0] if flow.client_conn.peername else "unknown"
    return client_identity(
        peer,
        flow.request.headers.get("X-Forwarded-For"),
        p.trusted_proxies,
        ipv6_prefix=p.rate_limit.ipv6_prefix,
    )


def _parse(rpc: RpcContext, body: bytes, rt: Runtime) -> RpcContext:
    p = rt.config.proxy
    if len(body) > p.max_body_bytes:
        parsed: Refusal | object = Refusal(
            413,
            -32600,
            f"body too large: {len(body)} bytes, the limit is {p.max_body_bytes}",
            data={"limit": p.max_body_bytes},
        )
    else:
        parsed = parse_body(body, max_batch=p.max_batch)
    if isinstance(parsed, Refusal):
        rpc.reply = Reply.refusal(parsed)  # no step runs; counted in the live metrics
        return rpc
    rpc.parsed = parsed  # type: ignore[assignment]
    rpc.answers = [
        error_obj(i.id, i.code, i.message) if isinstance(i, BadItem) else None
        for i in rpc.parsed.items
    ]
    return rpc
