"""Legacy calls chainproxy makes itself (``rpc.new_spec.LegacyCaller``): the
chainHead operations, the archive and chainSpec reads and the chain view's
ancestry fetches are each turned into legacy calls that run the steps a
client's cache miss runs (cache, forward with routing, budgets, coalescing,
hedging and failover, learn, store), on the runtime in force. No quota is
charged here and no usage is recorded: the client's own call was.
"""

from __future__ import annotations

from typing import Any

from addon.hooks.holder import RuntimeHolder
from addon.pipeline.context import RpcContext
from addon.pipeline.runner import Runner
from addon.rpc.jsonrpc import INTERNAL_ERROR, Call, Parsed
from addon.rpc.new_spec import CallFailed
from addon.steps.cache_lookup import cache_lookup
from addon.steps.cache_store import cache_store
from addon.steps.forward_pending import forward_pending
from addon.steps.learn import learn
from common.jsontext import thaw

RUNNER = Runner((cache_lookup, forward_pending, learn, cache_store))
CLIENT = "chainproxy"  # its name in the fair wait and the budgets


class _Always:
    live = True


class InternalCalls:
    def __init__(self, holder: RuntimeHolder) -> None:
        self.holder = holder

    async def call(self, network: str, method: str, params: list[Any]) -> Any:
        rt = self.holder.runtime
        if rt is None:
            raise CallFailed(INTERNAL_ERROR, "chainproxy is not configured")
        rpc = RpcContext(network, rt.clock(), _Always(), client=CLIENT)
        rpc.parsed = Parsed((Call(0, method, params),), is_batch=False)
        rpc.answers = [None]
        pending = RUNNER.run(rpc, rt)
        if pending is not None:
            await pending
        answer = rpc.answers[0]
        if answer is None and rpc.reply is not None and isinstance(rpc.reply.doc, dict):
            answer = rpc.reply.doc
        if not isinstance(answer, dict):
            raise CallFailed(INTERNAL_ERROR, f"{method}: no answer")
        if "error" in answer:
            err = answer["error"]
            if isinstance(err, dict):
                raise CallFailed(
                    int(err.get("code", INTERNAL_ERROR)),
                    str(err.get("message", "")),
                    err.get("data"),
                )
            raise CallFailed(INTERNAL_ERROR, f"{method}: {err!r}")
        # a large result kept as the node's text: its value, for chainproxy's use
        return thaw(answer.get("result"))
