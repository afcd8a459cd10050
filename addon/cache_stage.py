"""Cache steps: ``cache_lookup`` answers block-pinned reads from the edge
cache with the caller's own id and keeps each cacheable call's plan;
``cache_store`` stores what the upstream answered under those plans."""

from __future__ import annotations

from mitmproxy import http

from addon.cache_rules import answer_from, entries_to_store, plan
from addon.context import RpcContext
from addon.jsonrpc import Call
from addon.runtime import Runtime


def cache_lookup(flow: http.HTTPFlow, rpc: RpcContext, rt: Runtime) -> None:
    if rt.cache is None:
        return
    assert rpc.parsed is not None
    extra = rt.config.proxy.cache.methods
    finalized = rt.finalized.get(rpc.network)
    for i in rpc.pending():
        call = rpc.parsed.items[i]
        if not isinstance(call, Call):
            continue
        p = plan(rpc.network, call, extra=extra, finalized=finalized)
        if p is None:
            continue
        rpc.plans[i] = p
        values = []
        for key in p.keys:
            value = rt.cache.get(key)
            if value is None:
                break
            values.append(value)
        else:
            rpc.answers[i] = {"jsonrpc": "2.0", "id": call.id, "result": answer_from(p, values)}
            rpc.hits.add(i)
    if rpc.hits and not rpc.pending():
        rpc.cache = "HIT"


def cache_store(flow: http.HTTPFlow, rpc: RpcContext, rt: Runtime) -> None:
    """Cache what the upstream answers allow (results only: never errors or null).
    A soft result is only the best of poor answers (e.g. another block than the
    hash asked for): never cached."""
    if rt.cache is None or rpc.result is None or rpc.result.kind != "ok":
        return
    for i in rpc.forwarded:
        p, answer = rpc.plans.get(i), rpc.answers[i]
        if p is None or answer is None or "result" not in answer:
            continue
        for key, value in entries_to_store(p, answer["result"]):
            rt.cache.set(key, value)
