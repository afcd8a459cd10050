"""Pre-warm: as soon as a new best block is known, fetch the reads that
several clients made at each of the last blocks (``addon/chain/demand.py``),
pinned to the new block, so the first client after a block gets a cache hit,
or joins the call already in flight (coalescing), instead of waiting.

A pre-warm read goes through the same steps as a client's cache miss (cache,
forward, learn, store), on the same loop (``addon/pipeline/runner.py``), as
one more client (``prewarm``): it takes a node's
budget like any call, but never waits for one (when capacity is scarce,
clients come first) and is neither charged to a quota nor recorded as usage.
Pinned by the proxy, it stops at the first node that does not know the block
(no failover with the pin), and a client that joined it then goes on
unpinned by itself (``forward_pending``). Bounded: at most
``proxy.prewarm.max_reads`` reads per block and network, a few at a time;
a new block ends the previous block's run.

Metrics: ``chainproxy_prewarm_total{network, outcome}``: ``fetched`` (stored
in the cache ahead of clients), ``used`` (a client's read answered from one),
``wasted`` (no client came before the next block), ``skipped`` (capacity was
scarce, or the block was already cached).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from addon.chain.head_pinning import pin
from addon.hooks.holder import RuntimeHolder
from addon.pipeline.context import Reply, RpcContext
from addon.pipeline.runner import Runner
from addon.reporting.live_metrics import PREWARM
from addon.rpc.jsonrpc import Call, Parsed
from addon.runtime import Runtime
from addon.steps.cache_lookup import cache_lookup
from addon.steps.cache_store import cache_store
from addon.steps.forward_pending import forward_pending
from addon.steps.learn import learn
from addon.steps.reserve_bytes import heavy_units

log = logging.getLogger("chainproxy.prewarm")

CLIENT = "prewarm"  # its name in the fair wait and the budgets
_AT_ONCE = 4  # pre-warm reads in flight per network


def ahead(rpc: RpcContext, rt: Runtime) -> None:
    """Before the forward: a read the cache answered is not fetched (the run
    stops); one that goes upstream is noted as warmed before it is sent, so a
    client that joins it counts as served by the pre-warm. A read of a kind
    known to answer large is a heavy read, as a client's is after
    ``reserve_bytes`` (its lane, never hedged), but charged to nobody."""
    if not rpc.pending():
        rt.metrics.count_extra(PREWARM, network=rpc.network, outcome="skipped")
        rpc.reply = _CACHED  # already cached: nothing to do
        return
    for p in rpc.plans.values():
        rt.demand.warmed(rpc.network, p.keys)
    rpc.reserved = heavy_units(rpc, rt) or None


_CACHED = Reply(200, None, "skipped")
# the client path's steps a cache miss takes, on the runner every call runs on
RUNNER = Runner((cache_lookup, ahead, forward_pending, learn, cache_store))


class _Always:
    live = True


class Prewarmer:
    def __init__(self, holder: RuntimeHolder) -> None:
        self.holder = holder
        self._runs: dict[str, asyncio.Task[None]] = {}

    def new_head(self, network: str) -> None:
        rt = self.holder.runtime
        if rt is None or not rt.demand.enabled or rt.cache is None:
            return
        head = rt.chain.best.get(network)
        if head is None:
            return
        wasted = rt.demand.rotate(network)
        if wasted:
            rt.metrics.count_extra(PREWARM, wasted, network=network, outcome="wasted")
        calls = rt.demand.candidates(network, head.number)
        if not calls:
            return
        old = self._runs.pop(network, None)
        if old is not None and not old.done():
            old.cancel()  # that block is no longer the head
        task = asyncio.get_running_loop().create_task(
            self._warm(rt, network, head.hash, head.number, calls)
        )
        self._runs[network] = task

    async def _warm(
        self, rt: Runtime, network: str, block_hash: str, number: int, calls: Sequence[Call]
    ) -> None:
        fair = rt.fair_waits.get(network)
        if fair is not None and fair.busy:
            rt.metrics.count_extra(PREWARM, len(calls), network=network, outcome="skipped")
            return  # clients are waiting for capacity: they come first
        gate = asyncio.Semaphore(_AT_ONCE)

        async def one(call: Call) -> None:
            async with gate:
                await self._fetch(rt, network, block_hash, number, call)

        try:
            await asyncio.gather(*(one(c) for c in calls))
        except asyncio.CancelledError:
            raise
        except Exception:  # never the clients' problem
            log.exception("%s: pre-warm at block %d failed", network, number)

    async def _fetch(
        self, rt: Runtime, network: str, block_hash: str, number: int, call: Call
    ) -> None:
        pinned = pin(call, block_hash)
        if pinned is None:
            return
        rpc = RpcContext(network, rt.clock(), _Always(), client=CLIENT, background=True)
        rpc.parsed = Parsed((pinned,), is_batch=False)
        rpc.answers = [None]
        # pinned by the proxy with nothing to go back to: stop at the first miss
        rpc.pinned, rpc.min_block, rpc.unpinned = block_hash, number, {}
        pending = RUNNER.run(rpc, rt)
        if pending is not None:
            await pending
        ok = rpc.result is not None and rpc.result.kind == "ok" and rpc.error_status is None
        if ok:
            rt.metrics.count_extra(PREWARM, network=network, outcome="fetched")
