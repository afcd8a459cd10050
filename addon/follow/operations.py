"""The ``chainHead_v1`` operations on a pinned block, each made of legacy calls
by block hash on any suitable node (``rpc.new_spec.LegacyCaller``: cached,
routed, failed over), so none depends on the node a follow started on.

An operation's end is one event on the follow: done (``operationBodyDone``,
``operationCallDone``, ``operationStorageDone`` after its items),
``operationInaccessible`` when no node could answer or had the block (the
client may try again), or ``operationError`` with the node's error (trying
again will not help: e.g. the runtime call failed).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from addon.chain.header_hash import encode_header
from addon.follow import events
from addon.follow.follow import Follow, Operation
from addon.rpc.new_spec import CallFailed, LegacyCaller
from addon.upstream.failover import no_block_state

Outcome = Callable[[str, str], None]  # (kind, outcome): a metric


def _failed(op: Operation, e: CallFailed) -> events.Event:
    """Chainproxy's own failure (no node answered in time, or none had
    capacity), or every node asked saying it has not the block or its state
    (its only holder died, or nodes still importing it), makes the block
    inaccessible for now: the client may try again (``operationError`` says
    it would fail again). Any other error of a node is the answer."""
    data = e.data
    if isinstance(data, dict) and ("attempts" in data or "policy" in data):
        return events.operation("operationInaccessible", op.op_id)
    if no_block_state(e.message) is not None:
        return events.operation("operationInaccessible", op.op_id)
    return events.operation("operationError", op.op_id, error=e.message)


async def header(legacy: LegacyCaller, network: str, block_hash: str) -> str | None:
    """The SCALE-encoded header (hex), or None when no node has it."""
    got = await legacy.call(network, "chain_getHeader", [block_hash])
    encoded = encode_header(got)
    return "0x" + encoded.hex() if encoded is not None else None


async def body(legacy: LegacyCaller, network: str, block_hash: str) -> events.Event | None:
    block = await legacy.call(network, "chain_getBlock", [block_hash])
    inner = block.get("block") if isinstance(block, dict) else None
    extrinsics = inner.get("extrinsics") if isinstance(inner, dict) else None
    if not isinstance(extrinsics, list):
        return None
    return {"value": extrinsics}


async def call(
    legacy: LegacyCaller, network: str, block_hash: str, function: str, params: str
) -> events.Event | None:
    output = await legacy.call(network, "state_call", [function, params, block_hash])
    if not isinstance(output, str):
        return None
    return {"output": output}


_DONE = {"body": "operationBodyDone", "call": "operationCallDone"}


def run_single(
    follow: Follow,
    op: Operation,
    work: Callable[[], Any],
    outcome: Outcome,
) -> None:
    """Start a body or call operation: one result event, or a failure."""

    async def go() -> None:
        try:
            fields = await work()
        except asyncio.CancelledError:
            raise
        except CallFailed as e:
            ev = _failed(op, e)
        else:
            ev = (
                events.operation(_DONE[op.kind], op.op_id, **fields)
                if fields is not None
                else events.operation("operationInaccessible", op.op_id)
            )
        outcome(op.kind, _kind_of(ev))
        follow.finish(op, ev)

    op.task = asyncio.get_running_loop().create_task(go())


def run_storage(
    follow: Follow,
    op: Operation,
    pages: Callable[[], AsyncIterator[list[dict[str, Any]]]],
    outcome: Outcome,
) -> None:
    """Start a storage operation: its items in pages, each page after the
    first waiting for ``chainHead_v1_continue``, then done (or a failure)."""

    async def go() -> None:
        first = True
        try:
            async for items in pages():
                if not first:
                    op.waiting = True
                    op.resume.clear()
                    follow.emit(events.operation("operationWaitingForContinue", op.op_id))
                    await op.resume.wait()
                    op.waiting = False
                first = False
                if items:
                    follow.emit(events.operation("operationStorageItems", op.op_id, items=items))
        except asyncio.CancelledError:
            raise
        except CallFailed as e:
            ev = _failed(op, e)
        else:
            ev = events.operation("operationStorageDone", op.op_id)
        outcome(op.kind, _kind_of(ev))
        follow.finish(op, ev)

    op.task = asyncio.get_running_loop().create_task(go())


def _kind_of(ev: events.Event) -> str:
    name = str(ev.get("event", ""))
    if name.endswith("Done"):
        return "done"
    return "inaccessible" if name == "operationInaccessible" else "error"
