"""The chainHead step: a socket's ``chainHead_v1_*`` calls answered by
chainproxy itself, from its own follow of the network (``addon/follow/``),
so that no follow belongs to a node.

Answers as the spec gives them: a follow's id (its events after the answer,
``rpc.afters``), ``started`` with an operation id (its events after the
answer too), ``limitReached`` past the operations a follow may run, -32801
for a block the follow has not pinned, -32800 past the follows a socket may
hold. The quota, the usage record and the metrics are those of every call;
the subscription caps count follows like subscriptions
(``subscription_limits``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from mitmproxy.utils.asyncio_utils import create_task

from addon.follow import operations
from addon.follow.book import FollowBook
from addon.follow.follow import Follow
from addon.newspec.metered import MeteredCaller
from addon.newspec.storage_items import child_key, parse_items, storage_items
from addon.newspec.translate import BadParams, call_parameters
from addon.pipeline.context import RpcContext, Socket
from addon.quota.costs import base_cost
from addon.quota.quotas import Quotas
from addon.reporting.live_metrics import LiveMetrics
from addon.reporting.usage import UsageAggregator
from addon.rpc.blocks import is_block_hash
from addon.rpc.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, Call, error_obj
from addon.rpc.new_spec import (
    CHAIN_HEAD,
    CHAIN_HEAD_FOLLOW,
    DUPLICATE_HASHES,
    INVALID_BLOCK,
    NO_RUNTIME,
    NOT_WAITING,
    CallFailed,
    LegacyCaller,
)
from addon.steps.record import page_charge

_METHODS = frozenset(CHAIN_HEAD)
_BEGIN = "chainproxy: a follow's first events"
TOO_MANY_FOLLOWS = -32800
_LIMIT = {"result": "limitReached"}
_NAMES = {
    "chainHead_v1_follow": ("withRuntime",),
    "chainHead_v1_unfollow": ("followSubscription",),
    "chainHead_v1_header": ("followSubscription", "hash"),
    "chainHead_v1_body": ("followSubscription", "hash"),
    "chainHead_v1_call": ("followSubscription", "hash", "function", "callParameters"),
    "chainHead_v1_storage": ("followSubscription", "hash", "items", "childTrie"),
    "chainHead_v1_continue": ("followSubscription", "operationId"),
    "chainHead_v1_stopOperation": ("followSubscription", "operationId"),
    "chainHead_v1_unpin": ("followSubscription", "hashOrHashes"),
}


class ChainHeadNeeds(Protocol):
    """What the chainHead step reads of the runtime."""

    @property
    def follows(self) -> FollowBook: ...

    @property
    def legacy(self) -> LegacyCaller | None: ...

    @property
    def metrics(self) -> LiveMetrics: ...

    @property
    def quotas(self) -> Quotas: ...

    @property
    def usage(self) -> UsageAggregator: ...


class _Bad(ValueError):
    pass


def chain_head(rpc: RpcContext, rt: ChainHeadNeeds) -> Any:
    if rpc.socket is None or rpc.parsed is None:
        return None
    items = rpc.parsed.items
    todo = [i for i in rpc.pending() if isinstance(c := items[i], Call) and c.method in _METHODS]
    return _answer(rpc, rt, rpc.socket, todo) if todo else None


async def _answer(rpc: RpcContext, rt: ChainHeadNeeds, sock: Socket, todo: list[int]) -> None:
    assert rpc.parsed is not None
    for i in todo:  # in order: a batch may follow, then use the follow
        call = rpc.parsed.items[i]
        assert isinstance(call, Call)
        try:
            args = _args(call)
            result = await _one(rpc, rt, sock, call, args)
        except _Bad as e:
            rpc.answers[i] = error_obj(call.id, INVALID_PARAMS, f"invalid params: {e}")
            continue
        except _Error as e:
            rpc.answers[i] = error_obj(call.id, e.code, e.message, e.data)
            continue
        except CallFailed as e:
            rpc.answers[i] = error_obj(call.id, e.code, e.message, e.data)
            continue
        rpc.answers[i] = {"jsonrpc": "2.0", "id": call.id, "result": result}


async def _one(
    rpc: RpcContext, rt: ChainHeadNeeds, sock: Socket, call: Call, args: dict[str, Any]
) -> Any:
    method = call.method
    book = rt.follows
    if method == CHAIN_HEAD_FOLLOW:
        return _follow(rpc, book, sock, args)
    follow = book.get(args.get("followSubscription"), sock)
    if method == "chainHead_v1_unfollow":
        if follow is not None:
            follow.end("unfollowed")
        return None
    if method == "chainHead_v1_unpin":
        return _unpin(follow, args.get("hashOrHashes"))
    if method in ("chainHead_v1_continue", "chainHead_v1_stopOperation"):
        return _steer(follow, method, args.get("operationId"))
    block = _hash(args.get("hash"))
    if follow is None:
        return None if method == "chainHead_v1_header" else _LIMIT
    if block not in follow.pinned:
        raise _Error(INVALID_BLOCK, "invalid block hash: not pinned by this follow")
    if method == "chainHead_v1_header" and block in follow.headers:
        return follow.headers[block]  # as announced: no node needed, alive or not
    legacy = rt.legacy
    if legacy is None:
        raise _Error(INTERNAL_ERROR, "chainproxy is not configured")
    if method == "chainHead_v1_header":
        header = await operations.header(legacy, follow.network, block)
        if header is None:  # not encodable; null is the spec's word for a stale follow only
            raise _Error(INTERNAL_ERROR, "this block's header cannot be read")
        return header
    return _operation(rpc, rt, follow, legacy, call, block, args)


def _follow(rpc: RpcContext, book: FollowBook, sock: Socket, args: dict[str, Any]) -> str:
    with_runtime = args.get("withRuntime")
    if not isinstance(with_runtime, bool):
        raise _Bad("withRuntime must be a boolean")
    cap = book.settings.follows_per_socket
    if book.on_socket(sock) >= cap:
        raise _Error(
            TOO_MANY_FOLLOWS,
            f"too many chainHead_v1_follow subscriptions on this socket (limit {cap})",
            {"policy": "max_follows", "limit": cap, "reason": "unfollow one, or open a socket"},
        )
    follow = book.open(sock.network, sock, with_runtime)
    sock.subscriptions[follow.id] = CHAIN_HEAD_FOLLOW
    sock.changed()
    _after(rpc, follow.greet)
    _after(rpc, lambda: create_task(book.begin(follow), name=_BEGIN, keep_ref=True))
    return follow.id


def _operation(
    rpc: RpcContext,
    rt: ChainHeadNeeds,
    follow: Follow,
    legacy: LegacyCaller,
    call: Call,
    block: str,
    args: dict[str, Any],
) -> dict[str, Any]:
    network, method = follow.network, call.method

    def outcome(kind: str, result: str) -> None:
        rt.metrics.count_extra(
            "chainproxy_follow_operations_total", network=network, kind=kind, outcome=result
        )

    if method == "chainHead_v1_storage":
        try:
            queries = parse_items(args.get("items"))
            child_key(args.get("childTrie"))  # checked now: a bad one is -32602, not an event
        except BadParams as e:
            raise _Bad(_reason(e)) from None
        child = args.get("childTrie")
        free = follow.free_slots()
        if free <= 0 and queries:
            outcome("storage", "limit_reached")
            return _LIMIT
        taken = queries[:free]
        op = follow.new_operation("storage", max(1, len(taken)))
        page = rt.follows.settings.storage_page_items
        # its descendants' pages are priced as they are read, like archive_v1_storage's
        costs = rt.quotas.costs(rpc.tier)
        charge = page_charge(rpc, rt.quotas, rt.usage, call.method)
        legacy = MeteredCaller(legacy, costs, base_cost(call, costs), charge)

        def pages() -> AsyncIterator[list[dict[str, Any]]]:
            return storage_items(legacy, network, block, taken, child_trie=child, page_items=page)

        _after(rpc, lambda: operations.run_storage(follow, op, pages, outcome))
        return {
            "result": "started",
            "operationId": op.op_id,
            "discardedItems": len(queries) - len(taken),
        }
    if method == "chainHead_v1_call" and not follow.with_runtime:
        # the follow's kind first: a free slot later would not make this call work
        raise _Error(NO_RUNTIME, "chainHead_v1_call needs a follow with withRuntime: true")
    if follow.free_slots() <= 0:
        outcome(method.removeprefix("chainHead_v1_"), "limit_reached")
        return _LIMIT
    if method == "chainHead_v1_body":
        op = follow.new_operation("body", 1)
        _after(
            rpc,
            lambda: operations.run_single(
                follow, op, lambda: operations.body(legacy, network, block), outcome
            ),
        )
    else:
        function = args.get("function")
        if not isinstance(function, str) or not function:
            raise _Bad("function must be a runtime entry point's name")
        try:
            params = call_parameters(args.get("callParameters"))
        except BadParams as e:
            raise _Bad(_reason(e)) from None
        op = follow.new_operation("call", 1)
        _after(
            rpc,
            lambda: operations.run_single(
                follow,
                op,
                lambda: operations.call(legacy, network, block, function, params),
                outcome,
            ),
        )
    return {"result": "started", "operationId": op.op_id}


def _unpin(follow: Follow | None, value: Any) -> None:
    hashes = value if isinstance(value, list) else [value]
    if not all(isinstance(h, str) and is_block_hash(h) for h in hashes):
        raise _Bad("hashOrHashes must be a block hash or a list of them")
    if follow is None:
        return None  # a stale follow: ignored, as the spec says (duplicates too)
    lowered = [h.lower() for h in hashes]
    if len(set(lowered)) != len(lowered):
        raise _Error(DUPLICATE_HASHES, "a block hash is given twice")
    if any(h not in follow.pinned for h in lowered):
        raise _Error(INVALID_BLOCK, "invalid block hash: not pinned by this follow")
    follow.unpin(lowered)
    return None


def _steer(follow: Follow | None, method: str, op_id: Any) -> None:
    if not isinstance(op_id, str):
        raise _Bad("operationId must be a string")
    op = follow.operations.get(op_id) if follow is not None else None
    if method == "chainHead_v1_stopOperation":
        if follow is not None and op is not None:
            if op.task is not None:
                op.task.cancel()
            follow.operations.pop(op_id, None)
        return None
    if follow is None or op is None:
        return None  # an unknown or finished operation: no effect (the spec)
    if not op.waiting:
        raise _Error(NOT_WAITING, "the operation is not waiting for a continue")
    op.waiting = False  # at once: a second continue before its next page is -32803
    op.resume.set()
    return None


# --- params ---------------------------------------------------------------------------


def _args(call: Call) -> dict[str, Any]:
    names = _NAMES[call.method]
    params = call.params
    if isinstance(params, dict):
        return dict(params)
    if len(params) > len(names):
        raise _Bad(f"{call.method} takes at most {len(names)} params")
    return dict(zip(names, params, strict=False))


def _hash(value: Any) -> str:
    if not isinstance(value, str) or not is_block_hash(value):
        raise _Bad("hash must be a 0x-prefixed 32-byte hex block hash")
    return value.lower()


class _Error(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


def _after(rpc: RpcContext, fn: Callable[[], object]) -> None:
    """Run ``fn`` once the answer is sent (events never precede it)."""

    def run() -> None:
        fn()

    if rpc.afters is None:
        rpc.afters = []
    rpc.afters.append(run)


def _reason(e: BadParams) -> str:
    """A ``BadParams``' reason alone (``_answer`` adds the prefix once)."""
    return e.message.removeprefix("invalid params: ")
