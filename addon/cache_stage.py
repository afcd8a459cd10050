"""The ``Cache`` stage: answer block-pinned reads from the edge cache, with the
caller's own id; what is left goes upstream. Upstream answers are stored by
``store_answers`` (called by the Forwarder)."""

from __future__ import annotations

from mitmproxy import http

from addon.cache_rules import answer_from, entries_to_store, plan
from addon.jsonrpc import Call
from addon.respond import CTX_KEY, RpcContext
from addon.runtime import Runtime, RuntimeHolder


def _plan(rt: Runtime, network: str, call: Call):  # type: ignore[no-untyped-def]
    return plan(
        network, call, extra=rt.config.proxy.cache.methods, finalized=rt.finalized.get(network)
    )


class Cache:
    def __init__(self, holder: RuntimeHolder) -> None:
        self.holder = holder

    def request(self, flow: http.HTTPFlow) -> None:
        rpc: RpcContext | None = flow.metadata.get(CTX_KEY)
        rt = self.holder.runtime
        if flow.response or flow.error or not flow.live or rpc is None or rpc.parsed is None:
            return
        if rt is None or rt.cache is None:
            return
        for i in rpc.pending():
            call = rpc.parsed.items[i]
            if not isinstance(call, Call):
                continue
            p = _plan(rt, rpc.network, call)
            if p is None:
                continue
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


def store_answers(rt: Runtime, rpc: RpcContext) -> None:
    """Cache what the upstream answers allow (results only: never errors or null)."""
    if rt.cache is None or rpc.parsed is None:
        return
    for i in rpc.forwarded:
        call, answer = rpc.parsed.items[i], rpc.answers[i]
        if not isinstance(call, Call) or answer is None or "result" not in answer:
            continue
        p = _plan(rt, rpc.network, call)
        if p is None:
            continue
        for key, value in entries_to_store(p, answer["result"]):
            rt.cache.set(key, value)
