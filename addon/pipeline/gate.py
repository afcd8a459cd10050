"""Where a call enters: route by path (a POST), enforce the body limit, parse.

``open_rpc`` takes a POST: it returns the call's ``RpcContext`` (already
answered when the body was refused), or None when the flow is not a call on a
known network (a route refusal, a CORS preflight) or not an RPC call at all (a
sidecar path, marked for ``SidecarPassthrough``). ``open_message`` takes one
WebSocket message: its route, its client and tier were settled at the handshake
(``flow_caller``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from mitmproxy import http

from addon.chain.state import ChainState
from addon.mitm.responses import make_headers, refusal_response
from addon.pipeline.context import SIDECAR_PATH_KEY, Origin, Reply, RpcContext, Socket
from addon.pipeline.paths import Preflight, ProxyHealth, RpcRoute, SidecarRoute, classify
from addon.pipeline.reply import finish
from addon.quota.local import client_identity
from addon.quota.quotas import Quotas
from addon.quota.tiers import KEY_HEADER, KEY_PARAM, BadKey, Caller, take_key
from addon.rpc.jsonrpc import POLICY_REFUSED, BadItem, Parsed, Refusal, error_obj, parse_body
from addon.rpc.request_ids import new_request_id, request_id_of
from addon.upstream.pool import TIER_UNPROBED, UpstreamPool
from common.config import Config
from common.jsontext import dumps


class DirectRequest(Protocol):
    """A POST read by chainproxy itself (``addon/mitm/http_requests.Request``)."""

    @property
    def path(self) -> str: ...

    @property
    def body(self) -> bytes: ...

    def header(self, name: str) -> str | None: ...


class RefusalCounter(Protocol):
    """The live metrics as the gate counts what it refuses itself."""

    def count_refusal(self, policy: str, n: int = 1) -> None: ...


class GateNeeds(Protocol):
    """What the gate reads of the runtime: the config, the clock, the tiers, the
    chain state (the routing snapshot's freshness, for ``/rpc/healthz``) and
    the live metrics (a route it refuses)."""

    @property
    def metrics(self) -> RefusalCounter: ...

    @property
    def config(self) -> Config: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def pools(self) -> dict[str, UpstreamPool]: ...

    @property
    def quotas(self) -> Quotas: ...

    @property
    def chain(self) -> ChainState: ...


_HEALTH_HEADERS = (("Content-Type", "application/json"), ("Cache-Control", "no-store"))
_PREFLIGHT_HEADERS = (
    ("Access-Control-Allow-Methods", "POST, OPTIONS"),
    ("Access-Control-Allow-Headers", "Content-Type"),
    ("Access-Control-Max-Age", "86400"),
)


def open_rpc(flow: http.HTTPFlow, rt: GateNeeds) -> RpcContext | None:
    route = classify(flow.request.method, flow.request.path, rt.config.proxy.networks)
    if not isinstance(route, RpcRoute):
        _drop_key(flow)  # not a call: a key it carries is still never logged or passed on
    if isinstance(route, SidecarRoute):
        path = route.path
        flow.metadata[SIDECAR_PATH_KEY] = take_key(path, None)[1] if KEY_PARAM in path else path
        return None
    if isinstance(route, Refusal):
        # an unknown network or version, a wrong method: no call to count by
        # network (the path is the client's), one refusal of the request
        rt.metrics.count_refusal("request")
        response = refusal_response(route)
        response.headers["X-Request-Id"] = request_id_of(flow.request.headers.get("X-Request-Id"))
        finish(flow, response, None, now=rt.clock(), outcome="refused")
        return None
    if isinstance(route, Preflight):
        flow.response = http.Response.make(204, b"", make_headers(_PREFLIGHT_HEADERS))
        flow.response.headers["X-Request-Id"] = request_id_of(
            flow.request.headers.get("X-Request-Id")
        )
        return None
    if isinstance(route, ProxyHealth):
        body = dumps(health(rt.pools, rt.config.proxy.networks, rt.clock(), rt.chain))
        head = flow.request.method == "HEAD"
        # a HEAD's answer: the GET's headers, its length too, and no body
        # (mitmproxy sends whatever content a response has, HEAD or not)
        flow.response = http.Response.make(
            200, b"" if head else body, make_headers(_HEALTH_HEADERS)
        )
        flow.response.headers["Content-Length"] = str(len(body))
        flow.response.headers["X-Request-Id"] = request_id_of(
            flow.request.headers.get("X-Request-Id")
        )
        return None
    request_id = request_id_of(flow.request.headers.get("X-Request-Id"))
    caller, address = flow_caller(flow, rt)
    body = flow.request.raw_content or b""
    return _opened(route.network, caller, address, flow, request_id, body, rt)


def open_direct(
    request: DirectRequest, peer: str, origin: Origin, rt: GateNeeds
) -> RpcContext | None:
    """``open_rpc`` for a POST read by chainproxy itself (``addon/mitm/http_reads.py``):
    the same call, or None when it is not one (another path, a route refusal:
    mitmproxy's path answers those)."""
    route = classify("POST", request.path, rt.config.proxy.networks)
    if not isinstance(route, RpcRoute):
        return None
    request_id = request_id_of(request.header("X-Request-Id"))
    has_keys = rt.quotas.book.has_keys
    caller, _, address = request_caller(
        peer,
        request.header("X-Forwarded-For"),
        request.header(KEY_HEADER) if has_keys else None,
        request.path,
        rt,
    )
    return _opened(route.network, caller, address, origin, request_id, request.body, rt)


def _opened(
    network: str,
    caller: Caller | Refusal,
    address: str,
    origin: Origin,
    request_id: str,
    body: bytes,
    rt: GateNeeds,
) -> RpcContext:
    """A POST's call once its caller is known: refused at once (counted in the
    live metrics; no step runs; logged with its ``address``), or parsed."""
    if isinstance(caller, Refusal):
        rpc = RpcContext(network, rt.clock(), origin, address=address, request_id=request_id)
        rpc.reply = Reply.refusal(caller)
        return rpc
    rpc = RpcContext(
        network,
        rt.clock(),
        origin,
        client=caller.client,
        tier=caller.tier,
        address=caller.address,
        request_id=request_id,
    )
    return _parse(rpc, body, rt)


def open_message(content: bytes, sock: Socket, origin: Origin, rt: GateNeeds) -> RpcContext:
    rpc = RpcContext(
        sock.network,
        rt.clock(),
        origin,
        client=sock.client,
        tier=sock.tier,
        socket=sock,
        address=getattr(sock, "address", ""),
        request_id=new_request_id(),
    )
    return _parse(rpc, content, rt)


def flow_caller(flow: http.HTTPFlow, rt: GateNeeds) -> tuple[Caller | Refusal, str]:
    """Whom a request is charged to, and its address (``request_caller``). The
    API key is taken off the request here, so it is never logged, shown in
    mitmweb or passed on."""
    request = flow.request
    peer = flow.client_conn.peername[0] if flow.client_conn.peername else "unknown"
    has_keys = rt.quotas.book.has_keys
    caller, path, address = request_caller(
        peer,
        request.headers.get("X-Forwarded-For"),
        request.headers.get(KEY_HEADER) if has_keys else None,
        request.path,
        rt,
    )
    if path is not None:
        request.path = path
        if has_keys:
            request.headers.pop(KEY_HEADER, None)
    return caller, address


def _drop_key(flow: http.HTTPFlow) -> None:
    request = flow.request
    if KEY_PARAM in request.path:
        request.path = take_key(request.path, None)[1]
    request.headers.pop(KEY_HEADER, None)


def request_caller(
    peer: str, forwarded: str | None, key_header: str | None, path: str, rt: GateNeeds
) -> tuple[Caller | Refusal, str | None, str]:
    """Whom a request is charged to: its address (or the one a trusted proxy in
    front of us names in ``X-Forwarded-For``) and its tier, by address or API
    key; its path with the key taken off (None: no key looked for); and that
    address (a wrong key's too)."""
    p = rt.config.proxy
    address = client_identity(
        peer, forwarded, p.trusted_proxies, ipv6_prefix=p.rate_limit.ipv6_prefix
    )
    book = rt.quotas.book
    key = None
    new_path = None
    if book.has_keys:
        if key_header is not None or KEY_PARAM in path:
            key, new_path = take_key(path, key_header)
    elif "api_key" in path:
        # no keyed tiers: a key means nothing here, but it is still not kept
        _, new_path = take_key(path, None)
    if not book:
        return Caller(address, None, address), new_path, address  # most: no key, no tiers
    caller = book.caller(address, key)
    if isinstance(caller, BadKey):
        return (
            Refusal(
                401,
                POLICY_REFUSED,
                "unknown API key",
                data={
                    "policy": "api_key",
                    "reason": "this API key matches no tier: check it, or send none for the "
                    "keyless quota",
                },
            ),
            new_path,
            address,
        )
    return Caller(caller.client, caller.tier, address), new_path, address


def _parse(rpc: RpcContext, body: bytes, rt: GateNeeds) -> RpcContext:
    p = rt.config.proxy
    if len(body) > p.max_body_bytes:
        parsed: Refusal | Parsed = Refusal(
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
    rpc.parsed = parsed
    rpc.answers = [
        error_obj(i.id, i.code, i.message) if isinstance(i, BadItem) else None for i in parsed.items
    ]
    return rpc


def health(
    pools: dict[str, UpstreamPool],
    networks: tuple[str, ...],
    now: float,
    chain: ChainState | None = None,
) -> dict[str, object]:
    """``GET /rpc/healthz``: this process serves; per network its nodes and
    how many a call may go to now (probed healthy or not probed yet, on the
    network's chain, not outvoted, not ejected or paused). Always 200: every
    proxy sees the same nodes, so a balancer that took them out for a
    network's dead nodes would take them all out. ``snapshot``: per network,
    how many routing snapshots of the sidecar's this process has applied, how
    old the last one is (null: none yet), and the tip and finalized heights it
    routes and caches on (null: unknown, e.g. before the sidecar's first probe
    answered: height reads are not cached then): a view that stops refreshing
    while the sidecar is down shows here."""
    out = {}
    for name in networks:
        pool = pools.get(name)
        ups = list(pool.upstreams.values()) if pool is not None else []
        usable = sum(
            1
            for u in ups
            if u.tier <= TIER_UNPROBED
            and not (u.foreign or u.quarantined)
            and u.ejected_until <= now
            and u.backoff_until <= now
        )
        out[name] = {"nodes": len(ups), "usable": usable}
    doc: dict[str, object] = {"status": "ok", "networks": out}
    if chain is not None:
        doc["snapshot"] = {name: _snapshot_state(chain, name, now) for name in networks}
    return doc


def _snapshot_state(chain: ChainState, network: str, now: float) -> dict[str, object]:
    at = chain.heights_at.get(network)
    tip, finalized = chain.heights(network)
    return {
        "applied": chain.snapshots.get(network, 0),
        "age_s": None if at is None else round(max(0.0, now - at), 1),
        "tip": tip,
        "finalized": finalized,
    }
