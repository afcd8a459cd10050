"""Probes of Substrate node endpoints (node-rpc over HTTP, node-wss over WebSocket).

The checks are written once against ``RpcTransport``:

* full: batch 1 = ``system_health``, ``chain_getHeader``, ``chain_getFinalizedHead``,
  ``chain_getBlockHash [1]`` (+ ``[0]`` when a genesis is configured); batch 2 =
  the finalized header and the archive check (``state_getStorage`` of
  System.Number at block 1, which only an archive node still has);
* head: batch 1 = ``chain_getHeader``, ``chain_getFinalizedHead``,
  ``state_getRuntimeVersion`` (the best block's runtime: how the sidecar sees a
  runtime upgrade, ``sidecar.probing.chain_runtime``); batch 2 = the finalized
  header. Cheap enough to run every few seconds. A node that does not answer
  the runtime version is still live (the runtime is then unknown).
"""

from __future__ import annotations

import re
from typing import Any

import aiohttp

from sidecar.probing.probes.base import Observation, ProbeCall, run_probe
from sidecar.probing.probes.classify import ProbeFailure, classify_rpc_error, describe_rpc_error
from sidecar.probing.probes.jsonrpc_client import (
    MAX_ANSWER_BYTES,
    HttpRpc,
    RpcCall,
    RpcReply,
    RpcTransport,
    WsRpc,
)
from sidecar.probing.results import (
    BAD_RESPONSE,
    LIVE,
    RATE_LIMITED,
    SYNCING,
    WRONG_CHAIN,
    ProbeKind,
    ProbeResult,
)

# twox128("System") ++ twox128("Number"): present in every block's state.
SYSTEM_NUMBER_KEY = "0x26aa394eea5630e07c48ae0c9558cef702a5c1b19ab7a04f536c519aca4983ac"
PRUNED_TEXT = "State already discarded"

_HASH = re.compile(r"0x[0-9a-fA-F]{64}")
_HEX_NUMBER = re.compile(r"0x[0-9a-fA-F]{1,16}")

HEALTH = RpcCall("system_health", [])
HEADER = RpcCall("chain_getHeader", [])
FINALIZED_HEAD = RpcCall("chain_getFinalizedHead", [])
BLOCK_1 = RpcCall("chain_getBlockHash", [1])
RUNTIME_VERSION = RpcCall("state_getRuntimeVersion", [])
GENESIS = RpcCall("chain_getBlockHash", [0])


def _raise_if_rate_limited(replies: list[RpcReply]) -> None:
    for r in replies:
        if not r.ok and classify_rpc_error(r.error) == RATE_LIMITED:
            raise ProbeFailure(RATE_LIMITED, f"{r.method}: {describe_rpc_error(r.error)}")


def _required(reply: RpcReply) -> Any:
    """The result of a call the probe cannot do without; an error is a bad answer."""
    if not reply.ok:
        raise ProbeFailure(BAD_RESPONSE, f"{reply.method}: {describe_rpc_error(reply.error)}")
    return reply.result


def header_number(header: Any, what: str) -> int:
    """Block number of a header object (hex string; a plain integer is tolerated)."""
    if not isinstance(header, dict):
        raise ProbeFailure(BAD_RESPONSE, f"{what} header is not an object")
    number = header.get("number")
    if isinstance(number, int) and not isinstance(number, bool) and number >= 0:
        return number
    if isinstance(number, str) and _HEX_NUMBER.fullmatch(number):
        return int(number, 16)
    raise ProbeFailure(BAD_RESPONSE, f"{what} header has no valid number")


def block_hash(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _HASH.fullmatch(value):
        raise ProbeFailure(BAD_RESPONSE, f"{what} is not a block hash")
    return value.lower()


def archive_verdict(reply: RpcReply | None) -> bool | None:
    """Historical state at block 1 readable? None when the answer says nothing."""
    if reply is None:
        return None
    if reply.ok:
        return True  # any result, even null (key absent), means the state is there
    message = reply.error.get("message") if isinstance(reply.error, dict) else None
    if isinstance(message, str) and PRUNED_TEXT.lower() in message.lower():
        return False
    return None


def _archive_word(archive: bool | None) -> str:
    return {True: "yes", False: "no", None: "unknown"}[archive]


async def node_checks(
    rpc: RpcTransport, obs: Observation, *, kind: ProbeKind, genesis: str | None
) -> None:
    """Run the full or head checks over ``rpc``, filling ``obs`` (raises ProbeFailure)."""
    if kind == "head":
        await _head_checks(rpc, obs)
    else:
        await _full_checks(rpc, obs, genesis)


async def _finalized(rpc: RpcTransport, fin_hash: str, extra: list[RpcCall]) -> list[RpcReply]:
    replies, _ = await rpc.batch([RpcCall("chain_getHeader", [fin_hash]), *extra])
    _raise_if_rate_limited(replies)
    return replies


def _finalized_number(reply: RpcReply) -> int | None:
    header = _required(reply)
    if header is None:
        # A load-balanced endpoint may route this to a replica that has not seen
        # the block yet: no finalized height this time, not a broken node.
        return None
    return header_number(header, "finalized")


def runtime_of(reply: RpcReply) -> tuple[str, int] | None:
    """(spec name, spec version) of a runtime version answer; None when it is
    an error or not one."""
    version = reply.result if reply.ok else None
    if not isinstance(version, dict):
        return None
    name, spec = version.get("specName"), version.get("specVersion")
    if not isinstance(name, str) or not name or len(name) > 64:
        return None
    if isinstance(spec, bool) or not isinstance(spec, int) or not 0 <= spec < 2**32:
        return None
    return name, spec


async def _head_checks(rpc: RpcTransport, obs: Observation) -> None:
    replies, obs.latency_ms = await rpc.batch([HEADER, FINALIZED_HEAD, RUNTIME_VERSION])
    _raise_if_rate_limited(replies)
    obs.best = header_number(_required(replies[0]), "best")
    runtime = runtime_of(replies[2])
    if runtime is not None:
        obs.spec_name, obs.spec_version = runtime
    fin_hash = block_hash(_required(replies[1]), "finalized head")
    (fin_reply,) = await _finalized(rpc, fin_hash, [])
    obs.finalized = _finalized_number(fin_reply)
    spec = "" if obs.spec_version is None else f", spec {obs.spec_version}"
    obs.finish(LIVE, f"best {obs.best}, finalized {_opt(obs.finalized)}{spec}")


async def _full_checks(rpc: RpcTransport, obs: Observation, genesis: str | None) -> None:
    calls = [HEALTH, HEADER, FINALIZED_HEAD, BLOCK_1]
    if genesis is not None:
        calls.append(GENESIS)
    replies, obs.latency_ms = await rpc.batch(calls)
    _raise_if_rate_limited(replies)
    health, best, fin_head, block1 = replies[:4]
    obs.best = header_number(_required(best), "best")
    fin_hash = block_hash(_required(fin_head), "finalized head")

    got_genesis: str | None = None
    if genesis is not None:
        value = _required(replies[4])
        if value is None:
            raise ProbeFailure(BAD_RESPONSE, "chain_getBlockHash [0] is null")
        got_genesis = block_hash(value, "genesis hash")

    # Block 1's hash null: the node never had block 1 (warp sync), so no history.
    block1_hash: str | None = None
    archive_known: bool | None = None
    if block1.ok and block1.result is None:
        archive_known = False
    elif block1.ok:
        block1_hash = block_hash(block1.result, "block 1 hash")

    extra = [RpcCall("state_getStorage", [SYSTEM_NUMBER_KEY, block1_hash])] if block1_hash else []
    second = await _finalized(rpc, fin_hash, extra)
    obs.finalized = _finalized_number(second[0])
    obs.archive = archive_verdict(second[1]) if block1_hash else archive_known

    heights = (
        f"best {obs.best}, finalized {_opt(obs.finalized)}, archive {_archive_word(obs.archive)}"
    )
    if got_genesis is not None and genesis is not None and got_genesis != genesis.lower():
        obs.finish(
            WRONG_CHAIN, f"genesis {got_genesis[:12]}… is not {genesis.lower()[:12]}…; {heights}"
        )
        return
    if health.ok and isinstance(health.result, dict) and health.result.get("isSyncing") is True:
        obs.finish(SYNCING, f"node reports isSyncing; {heights}")
        return
    note = "" if health.ok else "; system_health unavailable"
    obs.finish(LIVE, heights + note)


def _opt(value: int | None) -> str:
    return "unknown" if value is None else str(value)


# ---- the two transports -----------------------------------------------------------------


async def probe_node_rpc(call: ProbeCall) -> ProbeResult:
    """Probe a node-rpc endpoint (JSON-RPC batches over HTTP POST)."""

    async def body(obs: Observation) -> None:
        rpc = HttpRpc(call.session, call.endpoint.url)
        await node_checks(rpc, obs, kind=call.kind, genesis=call.genesis)

    return await run_probe(call, body)


async def probe_node_wss(call: ProbeCall) -> ProbeResult:
    """Probe a node-wss endpoint: one WebSocket per probe, closed at the end."""
    # A short close wait: a server that ignores our close frame must not hold the
    # probe (a verdict reached before the close stands anyway).
    ws_timeout = aiohttp.ClientWSTimeout(ws_receive=None, ws_close=min(1.0, call.timeout_s / 4))

    async def body(obs: Observation) -> None:
        async with call.session.ws_connect(
            call.endpoint.url, timeout=ws_timeout, max_msg_size=MAX_ANSWER_BYTES, autoping=True
        ) as ws:
            await node_checks(WsRpc(ws), obs, kind=call.kind, genesis=call.genesis)

    return await run_probe(call, body)
