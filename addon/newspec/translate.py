"""The new spec's stateless reads in legacy terms (pure): each method's
params read and checked, the legacy calls that answer it, and the legacy
results turned into the new spec's shapes.

* ``archive_v1_header(hash)``: ``chain_getHeader(hash)``, SCALE-encoded
  (``chain/header_hash.encode_header``); null for a block no node knows.
* ``archive_v1_body(hash)``: ``chain_getBlock(hash)``'s extrinsics; null
  likewise.
* ``archive_v1_call(hash, function, callParameters)``: ``state_call``;
  ``{success, value}`` or ``{success: false, error}`` for a runtime failure,
  null for an unknown block.
* ``archive_v1_hashByHeight(height)``: ``chain_getBlockHash(height)`` as a
  list (the canonical block only: legacy calls cannot name the forks).
* ``archive_v1_finalizedHeight``: ``chain_getFinalizedHead`` then its header.
* ``archive_v1_genesisHash`` / ``chainSpec_v1_genesisHash``:
  ``chain_getBlockHash(0)``; ``chainSpec_v1_chainName``: ``system_chain``;
  ``chainSpec_v1_properties``: ``system_properties``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from addon.chain.header_hash import encode_header, header_hash
from addon.rpc.blocks import is_block_hash, parse_height
from addon.rpc.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS
from addon.rpc.new_spec import CallFailed

# how nodes say they do not have a block (as addon/upstream/failover.py reads them)
_UNKNOWN_BLOCK = ("unknownblock", "header was not found", "unknown block", "block not found")
_STATE_DISCARDED = "state already discarded"

# method -> its params' names, in order (named params are read by these names)
PARAMS: dict[str, tuple[str, ...]] = {
    "archive_v1_body": ("hash",),
    "archive_v1_header": ("hash",),
    "archive_v1_call": ("hash", "function", "callParameters"),
    "archive_v1_hashByHeight": ("height",),
    "archive_v1_finalizedHeight": (),
    "archive_v1_genesisHash": (),
    "chainSpec_v1_chainName": (),
    "chainSpec_v1_genesisHash": (),
    "chainSpec_v1_properties": (),
    "archive_v1_storage": ("hash", "items", "childTrie"),
    "archive_v1_stopStorage": ("operationId",),
    "archive_v1_storageDiff": ("hash", "items", "previousHash"),
    "archive_v1_stopStorageDiff": ("operationId",),
}
_OPTIONAL = frozenset({"childTrie", "previousHash"})
# params optional in one method only (``items`` of a diff: the whole trie)
_OPTIONAL_IN = {"archive_v1_storageDiff": frozenset({"items"})}


class BadParams(CallFailed):
    """Params that do not match the method: -32602, as the spec says."""

    def __init__(self, message: str) -> None:
        super().__init__(INVALID_PARAMS, f"invalid params: {message}")


def args(method: str, params: Any) -> list[Any]:
    """The params of ``method`` by position (a list, or an object by the
    spec's names); a missing one is ``BadParams`` unless it is optional."""
    names = PARAMS[method]
    if isinstance(params, dict):
        unknown = sorted(set(params) - set(names))
        if unknown:
            raise BadParams(f"unknown param {unknown[0]!r}")
        values = [params.get(n) for n in names]
        given = [n in params for n in names]
    elif isinstance(params, list):
        if len(params) > len(names):
            raise BadParams(f"{method} takes {len(names)} param(s), got {len(params)}")
        values = [*params, *([None] * (len(names) - len(params)))]
        given = [i < len(params) for i in range(len(names))]
    else:
        raise BadParams("params must be a list or an object")
    optional = _OPTIONAL | _OPTIONAL_IN.get(method, frozenset())
    for name, ok in zip(names, given, strict=True):
        if not ok and name not in optional:
            raise BadParams(f"missing {name}")
    return values


def block_hash(value: Any, name: str = "hash") -> str:
    if not is_block_hash(value):
        raise BadParams(f"{name} must be a 0x-prefixed 32-byte hex block hash")
    return str(value).lower()


def hex_bytes(value: Any, name: str) -> str:
    if not isinstance(value, str) or not _is_hex(value):
        raise BadParams(f"{name} must be a 0x-prefixed hex string")
    return value.lower()


def call_parameters(value: Any) -> str:
    """A runtime call's parameters as the legacy ``state_call`` takes them:
    hex with or without ``0x``, ``""`` for none (what Substrate's server
    accepts, and what polkadot-api sends for a call without parameters)."""
    if isinstance(value, str) and value[:2] not in ("0x", "0X"):
        value = "0x" + value
    return hex_bytes(value, "callParameters")


def _is_hex(value: str) -> bool:
    if value[:2] not in ("0x", "0X") or len(value) % 2:
        return False
    try:
        bytes.fromhex(value[2:])
    except ValueError:
        return False
    return True


def height(value: Any) -> int:
    # the spec says an integer; a decimal or 0x string (what legacy clients send) is read too
    n = parse_height(value)
    if n is None:
        raise BadParams("height must be a non-negative integer")
    return n


def legacy_call(method: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
    """The legacy call that answers a one-call method (all but the
    finalized height and the storage reads)."""
    if method in ("archive_v1_header", "archive_v1_body"):
        legacy = "chain_getHeader" if method == "archive_v1_header" else "chain_getBlock"
        return legacy, [block_hash(values[0])]
    if method == "archive_v1_call":
        at = block_hash(values[0])
        function = values[1]
        if not isinstance(function, str) or not function:
            raise BadParams("function must be a runtime entry point's name")
        return "state_call", [function, call_parameters(values[2]), at]
    if method == "archive_v1_hashByHeight":
        return "chain_getBlockHash", [height(values[0])]
    if method in ("archive_v1_genesisHash", "chainSpec_v1_genesisHash"):
        return "chain_getBlockHash", [0]
    if method == "chainSpec_v1_chainName":
        return "system_chain", []
    if method == "chainSpec_v1_properties":
        return "system_properties", []
    raise KeyError(method)


def answer(method: str, result: Any, values: Sequence[Any] = ()) -> Any:
    """The new spec's result from the legacy call's result (``values``: the
    call's arguments, as ``args`` read them)."""
    if method == "archive_v1_header":
        if result is None:
            return None
        got = header_hash(result) if values else None
        if got is not None and got != block_hash(values[0]):
            # not that block's (chopsticks answers an unknown hash with its
            # genesis): the spec's null for a block the node does not have
            return None
        return header_hex(result)
    if method == "archive_v1_body":
        return None if result is None else extrinsics(result)
    if method == "archive_v1_call":
        if not isinstance(result, str):
            raise CallFailed(INTERNAL_ERROR, "state_call answered no hex value")
        return {"success": True, "value": result}
    if method == "archive_v1_hashByHeight":
        return [] if result is None else [result]
    if method in ("archive_v1_genesisHash", "chainSpec_v1_genesisHash"):
        if not is_block_hash(result):
            raise CallFailed(INTERNAL_ERROR, "the nodes did not name the genesis block")
        return result
    return result  # chainName, properties: as the node answers them


def failed(method: str, err: CallFailed) -> Any:
    """The answer to a legacy call that failed: a value where the spec has one
    for it (null for an unknown block; a runtime call's own failure is
    ``{success: false}``), else the error raised again for the client."""
    if method in ("archive_v1_header", "archive_v1_body", "archive_v1_call"):
        if unknown_block(err):
            return None
    if method == "archive_v1_call" and _runtime_failure(err):
        return {"success": False, "error": err.message}
    raise err


def unknown_block(err: CallFailed) -> bool:
    low = err.message.lower()
    return any(m in low for m in _UNKNOWN_BLOCK)


def _runtime_failure(err: CallFailed) -> bool:
    """A node's own error for a ``state_call`` that reached the runtime (a
    trap, a panic, an entry point it lacks): Substrate's client errors
    (4003), never a JSON-RPC protocol error (-32xxx: bad params, no upstream,
    a policy) nor state a node no longer has."""
    return not -32768 <= err.code <= -32000 and _STATE_DISCARDED not in err.message.lower()


def header_hex(header: Any) -> str:
    encoded = encode_header(header)
    if encoded is None:
        raise CallFailed(INTERNAL_ERROR, "the node's header cannot be SCALE-encoded")
    return "0x" + encoded.hex()


def extrinsics(block: Any) -> list[str]:
    inner = block.get("block") if isinstance(block, dict) else None
    xts = inner.get("extrinsics") if isinstance(inner, dict) else None
    if not isinstance(xts, list) or not all(isinstance(x, str) for x in xts):
        raise CallFailed(INTERNAL_ERROR, "the node's block has no list of extrinsics")
    return xts


def header_number(header: Any) -> int:
    n = parse_height(header.get("number")) if isinstance(header, dict) else None
    if n is None:
        raise CallFailed(INTERNAL_ERROR, "the node's header has no block number")
    return n
