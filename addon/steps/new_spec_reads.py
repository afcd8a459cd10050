"""The new spec's stateless reads, answered by chainproxy itself:
``archive_v1_*``, ``chainSpec_v1_*`` and ``rpc_methods``.

Each read is turned into legacy calls made through ``rt.legacy``
(``addon/hooks/internal_calls.py``): cached, coalesced, routed to archive
nodes for old blocks, failed over and within the nodes' budgets like a
client's own legacy reads; translated back by ``addon/newspec/``. A node's
error comes back as a JSON-RPC error with its code and message, except where
the spec has an answer for it (null for a block no node knows,
``{success: false}`` for a runtime call that failed). ``archive_v1_storage``
and ``archive_v1_storageDiff`` are subscriptions
(``addon/newspec/archive_storage.py``): the operation's id is answered here
and its notifications follow the answer. ``rpc_methods`` lists what
this network serves on this transport (``addon/newspec/served.py``).

Calls answered here get one usage record each, with no node of their own
(``rpc.subscribed``, as a subscribe's); the legacy calls behind them are not
recorded again (the client's call was).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, Protocol

from addon.chain.state import ChainState
from addon.newspec import translate
from addon.newspec.archive_storage import DIFF, StorageOperations
from addon.newspec.metered import MeteredCaller
from addon.newspec.served import (
    ARCHIVE_STOP_STORAGE,
    ARCHIVE_STOP_STORAGE_DIFF,
    ARCHIVE_STORAGE,
    ARCHIVE_STORAGE_DIFF,
    RPC_METHODS,
    served_methods,
)
from addon.newspec.storage_diff import parse_diff_items, storage_diff
from addon.newspec.storage_items import child_key, parse_items, storage_items
from addon.pipeline.context import RpcContext, Socket
from addon.quota.costs import base_cost
from addon.quota.quotas import Quotas
from addon.reporting.usage import UsageAggregator
from addon.rpc.jsonrpc import INTERNAL_ERROR, POLICY_REFUSED, Call, error_obj
from addon.rpc.new_spec import ARCHIVE, CHAIN_SPEC, CallFailed, LegacyCaller
from addon.steps.record import page_charge
from addon.subs.hub import SubscriptionHub
from addon.upstream.pool import TIER_LAGGING, TIER_SYNCED, Upstream, UpstreamPool
from common.config import Config

ANSWERED_HERE = frozenset({*ARCHIVE, *CHAIN_SPEC, RPC_METHODS})
FINALIZED_HEIGHT = "archive_v1_finalizedHeight"

# archive_v1_storage and _storageDiff operations in progress, process-wide
# (each knows its socket)
OPERATIONS = StorageOperations()
DIFFS = StorageOperations(DIFF)
_STOPS = {ARCHIVE_STOP_STORAGE: OPERATIONS, ARCHIVE_STOP_STORAGE_DIFF: DIFFS}
# a routing snapshot older than this (the sidecar down: the last one stays)
# says nothing of the nodes' finalized heights now: a node is asked instead
SNAPSHOT_FRESH_S = 30.0
# per network, the highest finalized height answered: the spec says it only
# ever increases, and the nodes' least may fall (a node further behind is back)
_finalized: dict[str, int] = {}


class NewSpecReadsNeeds(Protocol):
    """What the new_spec_reads step reads of the runtime."""

    @property
    def chain(self) -> ChainState: ...

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def config(self) -> Config: ...

    @property
    def legacy(self) -> LegacyCaller | None: ...

    @property
    def pools(self) -> dict[str, UpstreamPool]: ...

    @property
    def quotas(self) -> Quotas: ...

    @property
    def subs(self) -> SubscriptionHub: ...

    @property
    def usage(self) -> UsageAggregator: ...


def new_spec_reads(rpc: RpcContext, rt: NewSpecReadsNeeds) -> Any:
    """Answers the new spec's reads and ``rpc_methods``; the rest goes on."""
    parsed = rpc.parsed
    if parsed is None:
        return None
    items = parsed.items
    for item in items:  # most calls are none of these: no list built for them
        if isinstance(item, Call) and item.method in ANSWERED_HERE:
            break
    else:
        return None
    reads: list[int] = []
    opening = 0  # archive_v1_storage / _storageDiff operations this message starts
    for i in rpc.pending():
        call = items[i]
        if not isinstance(call, Call) or call.method not in ANSWERED_HERE:
            continue
        rpc.subscribed[i] = None  # answered here: a usage record, no node of its own
        if call.method == RPC_METHODS:
            node_wss = rt.subs.serves(rpc.network)
            methods = served_methods(rt.config.proxy, websocket=rpc.websocket, node_wss=node_wss)
            rpc.answers[i] = _ok(call, {"methods": methods})
        elif call.method in (ARCHIVE_STORAGE, ARCHIVE_STORAGE_DIFF):
            answer = _start_operation(rpc, rt, call, opening)
            if "result" in answer:
                opening += 1
            elif "policy" in (answer["error"].get("data") or {}):
                del rpc.subscribed[i]  # a policy's refusal: no usage record, as for a subscribe
            rpc.answers[i] = answer
        elif call.method in _STOPS:
            rpc.answers[i] = _stop_operation(rpc, call)
        else:
            reads.append(i)
    return _answer_reads(rpc, rt, reads) if reads else None


async def _answer_reads(rpc: RpcContext, rt: NewSpecReadsNeeds, todo: list[int]) -> None:
    assert rpc.parsed is not None
    calls = [c for i in todo if isinstance(c := rpc.parsed.items[i], Call)]
    least = None
    pool = rt.pools.get(rpc.network)
    at = rt.chain.heights_at.get(rpc.network)
    if pool is not None and at is not None and rt.clock() - at <= SNAPSHOT_FRESH_S:
        least = least_finalized(pool.upstreams.values())
    answers = await asyncio.gather(*(_read(rt.legacy, rpc.network, c, least) for c in calls))
    for i, answer in zip(todo, answers, strict=True):
        rpc.answers[i] = answer


async def _read(
    legacy: LegacyCaller | None, network: str, call: Call, least: int | None
) -> dict[str, Any]:
    if call.method == FINALIZED_HEIGHT and least is not None:
        return _ok(call, _answered(network, least))  # no node asked
    if legacy is None:
        return error_obj(call.id, INTERNAL_ERROR, "chainproxy is not configured")
    try:
        return _ok(call, await _result(legacy, network, call))
    except CallFailed as e:
        return error_obj(call.id, e.code, e.message, e.data)


async def _result(legacy: LegacyCaller, network: str, call: Call) -> Any:
    values = translate.args(call.method, call.params)
    if call.method == FINALIZED_HEIGHT:
        return await _finalized_height(legacy, network)
    method, params = translate.legacy_call(call.method, values)
    try:
        got = await legacy.call(network, method, params)
    except CallFailed as e:
        return translate.failed(call.method, e)
    return translate.answer(call.method, got, values)


def least_finalized(upstreams: Iterable[Upstream]) -> int | None:
    """The least finalized height of the nodes calls go to first (synced, on
    this chain, not outvoted; only when none is, the lagging ones), as the
    sidecar saw them; None when it saw none. The spec's advice to a load
    balancer: every block at or below it is on each of them, so no one node's
    death takes back an ``archive_v1`` answer about it. A lagging node is left
    out while synced ones answer: one resyncing for hours would hold every
    answer back that long (and calls reach it only when no synced node can)."""
    by_tier: dict[int, list[int]] = {}
    for u in upstreams:
        if u.finalized is not None and u.tier <= TIER_LAGGING and not (u.foreign or u.quarantined):
            by_tier.setdefault(u.tier, []).append(u.finalized)
    heights = by_tier.get(TIER_SYNCED) or by_tier.get(TIER_LAGGING)
    return min(heights) if heights else None


def _answered(network: str, height: int) -> int:
    """``height``, or the higher one answered before: it never goes down."""
    height = max(height, _finalized.get(network, 0))
    _finalized[network] = height
    return height


async def _finalized_height(legacy: LegacyCaller, network: str) -> int:
    """Without the sidecar's view of the nodes: the finalized head of the node
    a call reaches."""
    head = await legacy.call(network, "chain_getFinalizedHead", [])
    header = await legacy.call(network, "chain_getHeader", [translate.block_hash(head, "head")])
    return _answered(network, translate.header_number(header))


def _start_operation(
    rpc: RpcContext, rt: NewSpecReadsNeeds, call: Call, opening: int
) -> dict[str, Any]:
    """Check an ``archive_v1_storage`` or ``_storageDiff`` call, answer its
    operation id, and start it once that answer is sent (``rpc.afters``)."""
    sock = rpc.socket
    legacy = rt.legacy
    if sock is None:  # the allowlist refuses it over HTTP
        return error_obj(call.id, INTERNAL_ERROR, f"{call.method} needs a WebSocket")
    if legacy is None:
        return error_obj(call.id, INTERNAL_ERROR, "chainproxy is not configured")
    cfg = rt.config.proxy.new_spec
    costs = rt.quotas.costs(rpc.tier)
    charge = page_charge(rpc, rt.quotas, rt.usage, call.method)
    metered = MeteredCaller(legacy, costs, base_cost(call, costs), charge)
    page_items = cfg.storage_page_items
    try:  # malformed params are -32602 first, whatever the socket holds
        if call.method == ARCHIVE_STORAGE:
            ops, (pages, child) = OPERATIONS, _storage_pages(rpc, metered, call, page_items)
        else:
            ops, pages, child = DIFFS, _diff_pages(rpc, metered, call, page_items), None
    except CallFailed as e:
        return error_obj(call.id, e.code, e.message, e.data)
    if OPERATIONS.held(sock) + DIFFS.held(sock) + opening >= cfg.operations:
        return error_obj(
            call.id,
            POLICY_REFUSED,
            f"too many archive_v1 storage operations on this socket (limit {cfg.operations})",
            {
                "policy": "max_subscriptions",
                "reason": "wait for one to end (or stop one with archive_v1_stopStorage "
                "or archive_v1_stopStorageDiff)",
                "limit": cfg.operations,
            },
        )
    op_id = ops.new_id()
    origin = rpc.origin

    def start() -> None:
        ops.start(op_id, sock, pages, sock.send, lambda: origin.live, child)

    if rpc.afters is None:
        rpc.afters = []
    rpc.afters.append(start)
    return _ok(call, op_id)


Pages = AsyncIterator[list[dict[str, str]]]


def _storage_pages(
    rpc: RpcContext, legacy: LegacyCaller, call: Call, page_items: int
) -> tuple[Pages, str | None]:
    """An ``archive_v1_storage`` call's pages (nothing read yet) and its child
    trie; ``CallFailed`` (-32602) for malformed params, before any id."""
    at, raw_items, child = translate.args(call.method, call.params)
    at = translate.block_hash(at)
    queries = parse_items(raw_items, pagination=True)
    child_key(child)  # checked now: a bad key is -32602, not a storageError later
    pages = storage_items(legacy, rpc.network, at, queries, child_trie=child, page_items=page_items)
    return pages, child


def _diff_pages(rpc: RpcContext, legacy: LegacyCaller, call: Call, page_items: int) -> Pages:
    """An ``archive_v1_storageDiff`` call's pages, its params checked now."""
    at, raw_items, previous = translate.args(call.method, call.params)
    at = translate.block_hash(at)
    if previous is not None:
        previous = translate.block_hash(previous, "previousHash")
    items = parse_diff_items(raw_items)
    return storage_diff(legacy, rpc.network, at, previous, items, page_items=page_items)


def release(sock: Socket) -> None:
    """A socket closed: its storage operations stop (not at their next page)."""
    OPERATIONS.release(sock)
    DIFFS.release(sock)


def _stop_operation(rpc: RpcContext, call: Call) -> dict[str, Any]:
    try:
        (op_id,) = translate.args(call.method, call.params)
    except CallFailed as e:
        return error_obj(call.id, e.code, e.message, e.data)
    sock: Socket | None = rpc.socket
    if sock is not None:
        _STOPS[call.method].stop(op_id, sock)
    return _ok(call, None)  # null, whatever the id (the spec)


def _ok(call: Call, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": call.id, "result": result}
