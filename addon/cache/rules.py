"""What may be answered from the edge cache, under which key (pure).

* ``chain_getBlock(hash)``, ``chain_getHeader(hash)``: immutable, cached.
* ``chain_getBlockHash(n)`` (number, hex string, or a list of them): one entry
  per height, only when every height asked is at or below the finalized height
  (unknown finality: never). ``1``, ``"0x1"`` and ``[1]`` share the entry for
  height 1; a list is answered only when every height in it is cached.
* configured methods (``proxy.cache.methods``: method -> index of the block-hash
  param): cached when that param is a block hash.
* hash-optional state reads (``addon/chain/head_pinning.py``'s table: ``state_getStorage``,
  ``state_call``, ``state_getMetadata`` …): cached when their block-hash param
  is a hash — state at a block never changes (head pinning makes most reads so).
* Never: errors, ``null``, anything not pinned to a block.

Keys carry the network and a canonical form of the params (sorted keys, hex
lower-cased, heights as integers), never the request id.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from addon.chain.head_pinning import HASH_POSITION
from addon.rpc.jsonrpc import Call
from common.jsontext import has_float

KEY_VERSION = "v1"
# heights of one chain_getBlockHash list answered from the cache: each is a
# look-up on the event loop (a disk read when not in memory), so a list of
# 50,000 cached heights held every other call for seconds
MAX_CACHED_HEIGHTS = 32
_HEX = re.compile(r"^0x[0-9a-fA-F]*$")
_HASH_PINNED = {"chain_getBlock": 0, "chain_getHeader": 0}
_KEY_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Plan:
    """How one call maps onto cache entries."""

    keys: tuple[str, ...]
    is_list: bool = False  # chain_getBlockHash([...]): answer is a list


def _canonical(value: Any) -> Any:
    if isinstance(value, str) and _HEX.match(value):
        return value.lower()
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    return value


def canonical_text(params: Any) -> str:
    """The key's form of the params: sorted keys, no spaces, ASCII (what
    ``_KEY_ENCODER`` writes, so keys stay those of earlier releases and of
    other processes sharing the disk or Redis). orjson writes the same text
    when its output is printable ASCII and holds no float (~1 µs instead of
    ~3, on every hit and miss); anything else goes the stdlib's way."""
    try:
        fast = orjson.dumps(params, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # an integer past 64 bits
        fast = None
    if fast is not None and fast.isascii() and b"\x7f" not in fast and not has_float(params):
        return fast.decode()
    return _KEY_ENCODER.encode(params)


def _hash_index(method: str, extra: Mapping[str, int]) -> int | None:
    if method in _HASH_PINNED:
        return _HASH_PINNED[method]
    if method in extra:
        return extra[method]
    return HASH_POSITION.get(method)


def plan(
    network: str, call: Call, *, extra: Mapping[str, int], finalized: int | None
) -> Plan | None:
    """The cache entries that answer ``call``, or None if it is not cacheable."""
    params = call.params
    if not isinstance(params, list):
        return None
    heights = call.facts.heights  # chain_getBlockHash(n…)
    if heights is not None:
        if not heights or finalized is None or max(heights) > finalized:
            return None
        if len(heights) > MAX_CACHED_HEIGHTS:
            return None  # one look-up per height on the loop: a long list goes to a node
        if _decimal_text(params[0]):
            # a node refuses "5" (Substrate's NumberOrHex: a number or 0x hex),
            # or answers it otherwise: it must not share height 5's entry
            return None
        keys = tuple(f"{KEY_VERSION}|{network}|blockhash|{n}" for n in heights)
        return Plan(keys, is_list=call.facts.height_list)
    idx = _hash_index(call.method, extra)
    if idx is None or call.facts.hash_at(idx) is None:
        return None
    canon = canonical_text(_canonical(params))
    return Plan((f"{KEY_VERSION}|{network}|{call.method}|{canon}",))


def answer_from(p: Plan, values: list[Any]) -> Any:
    """The result assembled from the plan's cached values (all present)."""
    return list(values) if p.is_list else values[0]


def entries_to_store(p: Plan, result: Any) -> list[tuple[str, Any]]:
    """What an upstream result lets us cache: never null, never a partial list."""
    if result is None:
        return []
    if p.is_list:
        if not isinstance(result, list) or len(result) != len(p.keys):
            return []
        return [(k, v) for k, v in zip(p.keys, result, strict=True) if v is not None]
    return [(p.keys[0], result)]


def _decimal_text(arg: Any) -> bool:
    """A height given as a decimal string (alone or in a list)."""
    values = arg if isinstance(arg, list) else [arg]
    return any(isinstance(v, str) and v[:2].lower() != "0x" for v in values)
