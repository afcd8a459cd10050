"""The request pipeline as thin mitmproxy addons, one stage each, in order:
Gate (route, size, parse) → Allowlist → RateLimit → Forwarder.

Each hook does a few lines around a pure core and hands state on through
``flow.metadata[CTX_KEY]``; whichever stage answers the flow calls ``finish``.
"""

from __future__ import annotations

import logging
from typing import Any

from mitmproxy import http

from addon.allowlist import refusal_reason
from addon.cache_stage import store_answers
from addon.forward import ForwardResult, forward, new_session
from addon.jsonrpc import (
    INTERNAL_ERROR,
    LIMIT_EXCEEDED,
    METHOD_NOT_FOUND,
    BadItem,
    Call,
    Refusal,
    error_obj,
    parse_body,
)
from addon.paths import Preflight, RpcRoute, SidecarRoute, classify
from addon.pinning import hints
from addon.ratelimit import client_identity
from addon.respond import (
    CTX_KEY,
    WS_CALL_KEY,
    WS_KEY,
    RpcContext,
    finish,
    json_response,
    make_headers,
    refusal_response,
)
from addon.runtime import Runtime, RuntimeHolder

log = logging.getLogger("chainproxy")

SIDECAR_PATH_KEY = "chainproxy.sidecar_path"


def _skip(flow: http.HTTPFlow) -> bool:
    # a WebSocket handshake is addon/websocket.py's; its messages come back here
    return bool(flow.response or flow.error or not flow.live or WS_KEY in flow.metadata)


def _rpc(flow: http.HTTPFlow) -> RpcContext | None:
    return flow.metadata.get(CTX_KEY)


class _Stage:
    def __init__(self, holder: RuntimeHolder) -> None:
        self.holder = holder


class Gate(_Stage):
    """Route by path, enforce the body limit, parse JSON-RPC."""

    def http_connect(self, flow: http.HTTPFlow) -> None:
        # A reverse proxy has no business tunnelling anywhere.
        flow.response = json_response(
            405, {"error": {"code": 405, "message": "CONNECT is not supported"}}
        )

    def request(self, flow: http.HTTPFlow) -> None:
        if _skip(flow):
            return
        rt = self.holder.runtime
        if rt is None:
            flow.response = json_response(
                503, error_obj(None, INTERNAL_ERROR, "chainproxy is not configured")
            )
            return
        route = classify(flow.request.method, flow.request.path, rt.config.proxy.networks)
        if isinstance(route, SidecarRoute):
            flow.metadata[SIDECAR_PATH_KEY] = route.path
            return
        if isinstance(route, Refusal):
            finish(flow, refusal_response(route), None, now=rt.clock(), outcome="refused")
            return
        if isinstance(route, Preflight):
            flow.response = http.Response.make(
                204,
                b"",
                make_headers(
                    [
                        ("Access-Control-Allow-Methods", "POST, OPTIONS"),
                        ("Access-Control-Allow-Headers", "Content-Type"),
                        ("Access-Control-Max-Age", "86400"),
                    ]
                ),
            )
            return
        self._start_rpc(flow, rt, route)

    def _start_rpc(self, flow: http.HTTPFlow, rt: Runtime, route: RpcRoute) -> None:
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
            return
        rpc.parsed = parsed
        rpc.answers = [
            error_obj(i.id, i.code, i.message) if isinstance(i, BadItem) else None
            for i in parsed.items
        ]
        flow.metadata[CTX_KEY] = rpc


class Allowlist(_Stage):
    """Refuse methods that are not on the read-only allowlist (403 / per item)."""

    def request(self, flow: http.HTTPFlow) -> None:
        rpc = _rpc(flow)
        rt = self.holder.runtime
        if _skip(flow) or rpc is None or rpc.parsed is None or rt is None:
            return
        allow = rt.config.proxy.allowlist
        for i, item in enumerate(rpc.parsed.items):
            if isinstance(item, Call) and item.method not in allow:
                reason = refusal_reason(item.method, websocket=WS_CALL_KEY in flow.metadata)
                rpc.answers[i] = error_obj(
                    item.id,
                    METHOD_NOT_FOUND,
                    f"method not allowed: {item.method[:64]}",
                    {"policy": "allowlist", "reason": reason},
                )
        if not rpc.parsed.is_batch and rpc.answers[0] is not None:
            finish(flow, json_response(403, rpc.answers[0]), rpc, now=rt.clock(), outcome="refused")


class RateLimit(_Stage):
    """Per-client quota; every call of a batch counts, a batch is taken whole or refused."""

    def request(self, flow: http.HTTPFlow) -> None:
        rpc = _rpc(flow)
        rt = self.holder.runtime
        if _skip(flow) or rpc is None or rt is None:
            return
        cost = len(rpc.pending())
        if cost == 0:
            return
        decision = rt.limiter.check(rpc.client, cost)
        rpc.rate = decision
        if decision.allowed:
            return
        call_id = rpc.parsed.items[0].id if rpc.parsed and not rpc.parsed.is_batch else None
        body = error_obj(
            call_id,
            LIMIT_EXCEEDED,
            f"rate limit exceeded: {decision.policy.replace(';w=', ' requests per ')}s",
            {
                "policy": decision.policy,
                "reason": (
                    f"this batch has {cost} calls, more than the whole quota of "
                    f"{decision.limit}: split it"
                    if cost > decision.limit
                    else f"client {rpc.client} is over its quota"
                    + (f" (this batch needs {cost})" if cost > 1 else "")
                ),
                "retry_after": decision.retry_after,
            },
        )
        finish(flow, json_response(429, body), rpc, now=rt.clock(), outcome="refused")


class Forwarder(_Stage):
    """Send what is still unanswered upstream (with failover) and answer the client."""

    async def request(self, flow: http.HTTPFlow) -> None:
        rpc = _rpc(flow)
        rt = self.holder.runtime
        if _skip(flow) or rpc is None or rpc.parsed is None or rt is None:
            return
        pending = rpc.pending()
        rpc.forwarded = pending
        is_batch = rpc.parsed.is_batch
        if pending:
            if rt.transport is None:
                rt.attach_session(new_session())
            assert rt.transport is not None
            calls: list[Call] = [rpc.parsed.items[i] for i in pending]  # type: ignore[misc]
            tip = rt.tips.get(rpc.network)
            hint = hints(calls, tip=tip, index=rt.blocks)
            result = await forward(
                calls,
                is_batch=is_batch,
                pool=rt.pools[rpc.network],
                transport=rt.transport,
                budget=rt.budget,
                clock=rt.clock,
                tip=tip,
                min_block=hint.min_block,
                prefer_archive=hint.prefer_archive,
            )
            if not flow.live:
                return  # the client went away while we waited
            rpc.attempts = result.attempts
            if result.upstream is not None:
                rpc.upstream, rpc.provider = result.upstream.id, result.upstream.provider
            status = self._fill(rpc, pending, result, rt)
            if result.kind == "ok":
                # A soft result is only the best of poor answers (e.g. another
                # block than the hash asked for): never cache it.
                store_answers(rt, rpc)
            record_usage(rt, rpc)
            if status is not None and not is_batch:
                finish(
                    flow,
                    json_response(status, rpc.answers[0]),
                    rpc,
                    now=rt.clock(),
                    outcome="error",
                )
                return
        else:
            record_usage(rt, rpc)  # all from the cache
        headers = [("X-Cache", rpc.cache)]
        if rpc.upstream:
            headers.append(("X-Chainproxy-Upstream", rpc.upstream))
            headers.append(("X-Chainproxy-Attempts", str(len(rpc.attempts))))
        doc = rpc.answers if is_batch else rpc.answers[0]
        finish(flow, json_response(200, doc, headers), rpc, now=rt.clock(), outcome="ok")

    @staticmethod
    def _fill(
        rpc: RpcContext, pending: list[int], result: ForwardResult, rt: Runtime
    ) -> int | None:
        """Put the upstream answers (or the failure) into the pending slots; the
        HTTP status a single call should get when it failed."""
        assert rpc.parsed is not None
        if result.answers is not None:
            for i, answer in zip(pending, result.answers, strict=True):
                item = rpc.parsed.items[i]
                rpc.answers[i] = {**answer, "jsonrpc": "2.0", "id": item.id}
                if "result" in answer and isinstance(item, Call):
                    rt.blocks.learn(item, answer["result"])
            return None
        attempts = [a.as_dict() for a in result.attempts]
        if result.kind == "no-upstream":
            status, message = 503, f"no upstream available for network {rpc.network}"
        elif result.kind == "deadline":
            status = 504
            message = f"deadline of {rt.budget.deadline_s:g}s passed before an upstream answered"
        else:
            status = 502
            message = f"all {len(attempts)} upstream attempt(s) failed"
        log.warning("%s %s: %s %s", rpc.network, status, message, attempts)
        for i in pending:
            rpc.answers[i] = error_obj(
                rpc.parsed.items[i].id, INTERNAL_ERROR, message, {"attempts": attempts}
            )
        return status


def record_usage(rt: Runtime, rpc: RpcContext) -> None:
    """One usage record per call that was answered from the cache or upstream
    (refusals are not proxied calls). A call counts as an error when its answer
    is a JSON-RPC error, the proxy's or the upstream's."""
    if rpc.parsed is None:
        return
    latency_ms = (rt.clock() - rpc.started) * 1000
    failover = len(rpc.attempts) > 1
    endpoint = rpc.upstream or (rpc.attempts[-1].endpoint if rpc.attempts else None)
    for i in (*rpc.hits, *rpc.forwarded):
        item, answer = rpc.parsed.items[i], rpc.answers[i]
        if not isinstance(item, Call) or answer is None:
            continue
        hit = i in rpc.hits
        rt.usage.record(
            network=rpc.network,
            method=item.method,
            endpoint=None if hit else endpoint,
            latency_ms=latency_ms,
            error="error" in answer,
            failover=failover and not hit,
            cache_hit=hit,
        )


class Guard:
    """Last in the chain: a flow nobody answered (a bug raised in a hook) gets a
    JSON 500 here, so mitmproxy never falls back to forwarding it itself."""

    def request(self, flow: http.HTTPFlow) -> None:
        if _skip(flow):
            return
        flow.metadata.pop(CTX_KEY, None)
        log.error(
            "no stage answered %s %s: see the addon error above",
            flow.request.method,
            flow.request.path[:200],
        )
        flow.response = json_response(500, error_obj(None, INTERNAL_ERROR, "internal proxy error"))
