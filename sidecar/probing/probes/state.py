"""The state checks of a full probe round: does the node still hold the state
at these blocks? (``sidecar.probing.horizon`` plans the blocks and folds the
answers.)

Two requests, over the endpoint's own transport: a batch of
``chain_getBlockHash(n)``, then a batch of ``state_getStorage`` of
System.Number at each hash. A pruned node answers the hash of an old block
but "State already discarded" (or an unknown-block error) for its state; any
result, ``null`` included, means the state is there. A ``null`` hash below
the node's best is a block it never had (a warp sync), so no state either.
Anything else says nothing about that block. Like every probe, it never
raises (but ``asyncio.CancelledError``) and never shows the endpoint's URL:
a failure is simply no reading.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import aiohttp

from sidecar.probing.probes.base import ProbeCall
from sidecar.probing.probes.classify import classify_rpc_error
from sidecar.probing.probes.jsonrpc_client import (
    MAX_ANSWER_BYTES,
    HttpRpc,
    RpcCall,
    RpcReply,
    RpcTransport,
    WsRpc,
)
from sidecar.probing.probes.node import SYSTEM_NUMBER_KEY, block_hash
from sidecar.probing.results import RATE_LIMITED

log = logging.getLogger("chainproxy.sidecar.prober")

Checks = tuple[tuple[int, bool], ...]  # (block, its state held), the conclusive ones

# how nodes say they no longer (or never) had a block's state
_GONE = (
    "state already discarded",
    "unknownblock",
    "unknown block",
    "header was not found",
    "block not found",
)


def state_verdict(reply: RpcReply) -> bool | None:
    """Held (any result), not held (discarded, unknown block), or None."""
    if reply.ok:
        return True
    message = reply.error.get("message") if isinstance(reply.error, dict) else reply.error
    if isinstance(message, str) and any(g in message.lower() for g in _GONE):
        return False
    return None


def _limited(replies: Sequence[RpcReply]) -> bool:
    return any(not r.ok and classify_rpc_error(r.error) == RATE_LIMITED for r in replies)


async def state_checks(rpc: RpcTransport, blocks: Sequence[int]) -> Checks:
    """The state at ``blocks``, held or not (blocks the node said nothing
    certain about are left out; a rate-limited node says nothing at all)."""
    if not blocks:
        return ()
    replies, _ = await rpc.batch([RpcCall("chain_getBlockHash", [n]) for n in blocks])
    if _limited(replies):
        return ()
    out: list[tuple[int, bool]] = []
    asked: list[tuple[int, str]] = []
    for n, reply in zip(blocks, replies, strict=True):
        if reply.ok and reply.result is None:
            out.append((n, False))  # a block it never had
        elif reply.ok:
            asked.append((n, block_hash(reply.result, "block hash")))
    if asked:
        calls = [RpcCall("state_getStorage", [SYSTEM_NUMBER_KEY, h]) for _, h in asked]
        replies, _ = await rpc.batch(calls)
        if _limited(replies):
            return ()
        for (n, _), reply in zip(asked, replies, strict=True):
            held = state_verdict(reply)
            if held is not None:
                out.append((n, held))
    return tuple(sorted(out))


async def check_state(call: ProbeCall, blocks: Sequence[int]) -> Checks:
    """``state_checks`` on a node-rpc (HTTP) or node-wss (one WebSocket, closed
    at the end) endpoint, within ``call.timeout_s``; () when anything failed."""
    if not blocks:
        return ()
    try:
        async with asyncio.timeout(call.timeout_s):
            if call.endpoint.kind == "node-wss":
                return await _over_ws(call, blocks)
            return await state_checks(HttpRpc(call.session, call.endpoint.url), blocks)
    except Exception as exc:  # a failed check is no reading, never an error of the prober
        log.debug("state checks of %s: %s", call.endpoint.id, type(exc).__name__)
        return ()


async def _over_ws(call: ProbeCall, blocks: Sequence[int]) -> Checks:
    ws_timeout = aiohttp.ClientWSTimeout(ws_receive=None, ws_close=min(1.0, call.timeout_s / 4))
    kw: dict[str, Any] = {"timeout": ws_timeout, "max_msg_size": MAX_ANSWER_BYTES}
    async with call.session.ws_connect(call.endpoint.url, autoping=True, **kw) as ws:
        return await state_checks(WsRpc(ws), blocks)
