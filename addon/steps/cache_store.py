"""The cache store step: what the upstream answered is stored under the plans
``cache_lookup`` made (results only: never errors, null or soft answers)."""

from __future__ import annotations

from addon.cache.per_runtime import runtime_entry
from addon.cache.rules import entries_to_store
from addon.pipeline.context import RpcContext
from addon.pipeline.jsonrpc import Call
from addon.runtime import Runtime


def cache_store(rpc: RpcContext, rt: Runtime) -> None:
    """Cache what the upstream answers allow (results only: never errors or null).
    A soft result is only the best of poor answers (e.g. another block than the
    hash asked for): never cached."""
    if rt.cache is None or rpc.result is None or rpc.result.kind != "ok":
        return
    for i in rpc.forwarded:
        p, answer = rpc.plans.get(i), rpc.answers[i]
        if p is None or answer is None or "result" not in answer:
            continue
        entries = entries_to_store(p, answer["result"])
        call = rpc.parsed.items[i] if rpc.parsed is not None else None
        if entries and isinstance(call, Call):
            by_runtime = runtime_entry(rpc.network, call, rt.cache)
            if by_runtime is not None:
                # one copy per runtime, not one per block (hundreds of KB each)
                entries = [(by_runtime, answer["result"])]
        for key, value in entries:
            rt.cache.set(key, value)
            if rt.shared_cache is not None:
                rt.shared_cache.put(key, value)
