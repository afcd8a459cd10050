"""What a call costs in quota units (pure).

A plain call costs 1, so light clients see the old "100 calls a minute". Heavy
reads cost what they make a node do, read from their parameters before they
are sent, and from the bytes they answer after:

* ``state_getKeysPaged`` / ``childstate_getKeysPaged``: 1 unit per
  ``keys_per_unit`` (100) keys asked (``count``);
* ``state_queryStorageAt`` (``childstate_getStorageEntries``,
  ``state_getReadProof``, ``state_getChildReadProof``): 1 unit per
  ``storage_keys_per_unit`` (10) keys;
* ``chain_getBlockHash`` of a list of heights: 1 unit per ``keys_per_unit``
  (100) heights;
  ``state_queryStorage`` also times the blocks its range spans, when their
  heights are known (else the range is charged by its bytes);
* an answer over ``free_bytes`` (64 KiB): 1 more unit per started
  ``bytes_per_unit`` (64 KiB) beyond, charged after the answer (the client's
  next call may be refused). A cache hit costs its base cost only: it costs
  the nodes nothing.

The new spec's calls are priced like the legacy calls chainproxy makes for
them: ``archive_v1_call`` / ``chainHead_v1_call`` as ``state_call`` (by their
``function`` for ``costs.runtime_apis``); ``archive_v1_storage`` /
``chainHead_v1_storage`` as ``state_queryStorageAt`` of their value and hash
items, plus one page of ``DESCENDANTS_KEYS`` keys and their values per
descendants item (further pages are charged as they are read:
``addon/newspec/metered.py``); ``archive_v1_storageDiff`` as two headers and
such a page at each of its two blocks per item (further pages likewise); what
steers or ends something already paid for (``chainHead_v1_unpin``,
``_continue``, ``_stopOperation``, ``_unfollow``, ``archive_v1_stopStorage``,
``_stopStorageDiff``) is free like an unsubscribe; the rest costs 1.

Operators override the base cost per method (``costs.methods``) and, for
``state_call``, per runtime API, its first parameter (``costs.runtime_apis``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from addon.rpc.jsonrpc import Call
from addon.rpc.sub_methods import UNSUBSCRIBE
from common.config.model import CostConfig
from common.jsontext import RawJson

# A descendants storage item of the new spec (``archive_v1_storage``,
# ``chainHead_v1_storage``) is read a page of this many keys at a time
# (``state_getKeysPaged``, then their values): its base price is one such page.
DESCENDANTS_KEYS = 100
# method -> position of its ``count`` parameter. Named params (an object) are
# read by the names Substrate's RPC gives them (its Rust arguments': a node
# answers ``{"prefix": …, "count": 1000}`` as it answers the list).
_PAGED_COUNT = {"state_getKeysPaged": 1, "state_getKeysPagedAt": 1, "childstate_getKeysPaged": 2}
# storage reads of a list of keys (named ``keys``) -> the position of that list
_STORAGE_KEYS = {
    "state_queryStorageAt": 0,
    "state_queryStorage": 0,
    "childstate_getStorageEntries": 1,
    "state_getReadProof": 0,  # a proof walks the trie for every key
    "state_getChildReadProof": 1,
}
RUNTIME_API_CALLS = frozenset({"state_call", "state_callAt"})
# block hashes asked by height, a list of heights at once (priced per key)
HEIGHT_LISTS = frozenset({"chain_getBlockHash", "chain_getHead"})
# the new spec's runtime calls -> position of their ``function`` param
_NEW_SPEC_CALLS = {"archive_v1_call": 1, "chainHead_v1_call": 2}
# the new spec's storage reads -> position of their ``items`` param
_NEW_SPEC_STORAGE = {"archive_v1_storage": 1, "chainHead_v1_storage": 2}
STORAGE_DIFF = "archive_v1_storageDiff"
_DESCENDANTS = ("descendantsValues", "descendantsHashes")
# what gives back, steers or ends something already paid for
_FREE = frozenset(
    {
        *UNSUBSCRIBE,
        "chainHead_v1_unpin",
        "chainHead_v1_continue",
        "chainHead_v1_stopOperation",
        "chainHead_v1_unfollow",
        "archive_v1_stopStorage",
        "archive_v1_stopStorageDiff",
    }
)

Heights = Callable[[str], int | None]  # block hash -> height, when known
# methods whose cost is not simply 1 unless the operator prices them
_PRICED = frozenset(
    {
        *_FREE,
        *_PAGED_COUNT,
        *_STORAGE_KEYS,
        *RUNTIME_API_CALLS,
        *_NEW_SPEC_CALLS,
        *_NEW_SPEC_STORAGE,
        STORAGE_DIFF,
        *HEIGHT_LISTS,
    }
)


def runtime_api(call: Call) -> str | None:
    """The runtime API a ``state_call`` asks for (its first parameter), or a
    new-spec call (its ``function``)."""
    method = call.method
    if method in RUNTIME_API_CALLS:
        api = _param(call, 0, "name")
    elif method in _NEW_SPEC_CALLS:
        api = _param(call, _NEW_SPEC_CALLS[method], "function")
    else:
        return None
    return api if isinstance(api, str) else None


def base_cost(
    call: Call, costs: CostConfig, *, height: Heights | None = None, tip: int | None = None
) -> int:
    """Units a call takes before it is answered."""
    method = call.method
    if method not in _PRICED and not costs.methods:
        return 1  # nearly every call
    if method in _FREE:
        return 0  # giving back what a subscribe took would only teach clients to churn
    if not costs.enabled:
        return 1
    if costs.runtime_apis:
        api = runtime_api(call)
        if api is not None and api in costs.runtime_apis:
            return costs.runtime_apis[api]
    override = costs.methods.get(method)
    if override is not None:
        return override
    if method in _NEW_SPEC_CALLS:  # a state_call, as the operator prices those
        return costs.methods.get("state_call", 1)
    if method in _NEW_SPEC_STORAGE:
        return _storage_items_cost(_param(call, _NEW_SPEC_STORAGE[method], "items"), costs)
    if method == STORAGE_DIFF:  # two headers, then a page at each block per item
        items = _param(call, 1, "items")
        n = len(items) if isinstance(items, list) and items else 1
        return 2 + n * 2 * _page_cost(costs)
    position = _PAGED_COUNT.get(method)
    if position is not None:
        count = _param(call, position, "count")
        if isinstance(count, int) and not isinstance(count, bool) and count > 0:
            return max(1, math.ceil(count / costs.keys_per_unit))
        return 1
    if method in HEIGHT_LISTS:
        heights = _param(call, 0)
        n = len(heights) if isinstance(heights, list) else 1
        return max(1, math.ceil(n / costs.keys_per_unit))
    if method in _STORAGE_KEYS:
        keys = _param(call, _STORAGE_KEYS[method], "keys")
        n = len(keys) if isinstance(keys, list) else 1
        span = _span(call, height, tip) if method == "state_queryStorage" else 1
        return max(1, math.ceil(n * span / costs.storage_keys_per_unit))
    return 1


def bytes_cost(nbytes: int, costs: CostConfig) -> int:
    """Units an answer of ``nbytes`` takes beyond its base cost."""
    if not costs.enabled or nbytes <= costs.free_bytes:
        return 0
    return math.ceil((nbytes - costs.free_bytes) / costs.bytes_per_unit)


def answer_bytes(value: Any) -> int:
    """About the size of ``value`` as JSON, without writing it out again: the
    answers that matter are long hex strings or lists of them."""
    if isinstance(value, str):
        return len(value) + 2
    if isinstance(value, RawJson):
        return len(value)
    if isinstance(value, list):
        return 2 + sum(answer_bytes(v) + 1 for v in value)
    if isinstance(value, dict):
        return 2 + sum(len(k) + 4 + answer_bytes(v) for k, v in value.items())
    if isinstance(value, int) and not isinstance(value, bool):
        return 2 + value.bit_length() * 3 // 10  # its digits, about (no str(): big ints)
    return 8


def _storage_items_cost(items: Any, costs: CostConfig) -> int:
    """A new-spec storage read: its value and hash items as one
    ``state_queryStorageAt``, each descendants item as a page of keys
    (``state_getKeysPaged``) and their values."""
    if not isinstance(items, list):
        return 1
    pages = sum(isinstance(x, dict) and x.get("type") in _DESCENDANTS for x in items)
    direct = len(items) - pages
    return max(1, math.ceil(direct / costs.storage_keys_per_unit) + pages * _page_cost(costs))


def _page_cost(costs: CostConfig) -> int:
    """A page of ``DESCENDANTS_KEYS`` keys listed, then their values read."""
    return math.ceil(DESCENDANTS_KEYS / costs.keys_per_unit) + math.ceil(
        DESCENDANTS_KEYS / costs.storage_keys_per_unit
    )


def _param(call: Call, position: int, name: str | None = None) -> Any:
    params = call.params
    if isinstance(params, list) and len(params) > position:
        return params[position]
    if name is not None and isinstance(params, dict):
        return params.get(name)
    return None


def _span(call: Call, height: Heights | None, tip: int | None) -> int:
    """Blocks a ``state_queryStorage(keys, from, to?)`` range covers, when known."""
    if height is None:
        return 1
    start, end = _param(call, 1, "block"), _param(call, 2, "hash")
    first = height(start) if isinstance(start, str) else None
    last = height(end) if isinstance(end, str) else tip if end is None else None
    if first is None or last is None:
        return 1
    return max(1, last - first + 1)
