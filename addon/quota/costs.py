"""What a call costs in quota units (pure).

A plain call costs 1, so light clients see the old "100 calls a minute". Heavy
reads cost what they make a node do, read from their parameters before they
are sent, and from the bytes they answer after:

* ``state_getKeysPaged`` / ``childstate_getKeysPaged``: 1 unit per
  ``keys_per_unit`` (100) keys asked (``count``);
* ``state_queryStorageAt``: 1 unit per ``storage_keys_per_unit`` (10) keys;
  ``state_queryStorage`` also times the blocks its range spans, when their
  heights are known (else the range is charged by its bytes);
* an answer over ``free_bytes`` (64 KiB): 1 more unit per started
  ``bytes_per_unit`` (64 KiB) beyond, charged after the answer (the client's
  next call may be refused). A cache hit costs its base cost only: it costs
  the nodes nothing.

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

# method -> position of its ``count`` parameter
_PAGED_COUNT = {"state_getKeysPaged": 1, "state_getKeysPagedAt": 1, "childstate_getKeysPaged": 2}
_STORAGE_KEYS = frozenset({"state_queryStorageAt", "state_queryStorage"})
RUNTIME_API_CALLS = frozenset({"state_call", "state_callAt"})

Heights = Callable[[str], int | None]  # block hash -> height, when known
# methods whose cost is not simply 1 unless the operator prices them
_PRICED = frozenset({*UNSUBSCRIBE, *_PAGED_COUNT, *_STORAGE_KEYS, *RUNTIME_API_CALLS})


def runtime_api(call: Call) -> str | None:
    """The runtime API a ``state_call`` asks for (its first parameter)."""
    if call.method in RUNTIME_API_CALLS and isinstance(call.params, list) and call.params:
        api = call.params[0]
        if isinstance(api, str):
            return api
    return None


def base_cost(
    call: Call, costs: CostConfig, *, height: Heights | None = None, tip: int | None = None
) -> int:
    """Units a call takes before it is answered."""
    method = call.method
    if method not in _PRICED and not costs.methods:
        return 1  # nearly every call
    if method in UNSUBSCRIBE:
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
    position = _PAGED_COUNT.get(method)
    if position is not None:
        count = _param(call, position)
        if isinstance(count, int) and not isinstance(count, bool) and count > 0:
            return max(1, math.ceil(count / costs.keys_per_unit))
        return 1
    if method in _STORAGE_KEYS:
        keys = _param(call, 0)
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
    if isinstance(value, list):
        return 2 + sum(answer_bytes(v) + 1 for v in value)
    if isinstance(value, dict):
        return 2 + sum(len(k) + 4 + answer_bytes(v) for k, v in value.items())
    return 8


def _param(call: Call, position: int) -> Any:
    params = call.params
    if isinstance(params, list) and len(params) > position:
        return params[position]
    return None


def _span(call: Call, height: Heights | None, tip: int | None) -> int:
    """Blocks a ``state_queryStorage(keys, from, to?)`` range covers, when known."""
    if height is None:
        return 1
    start, end = _param(call, 1), _param(call, 2)
    first = height(start) if isinstance(start, str) else None
    last = height(end) if isinstance(end, str) else tip if end is None else None
    if first is None or last is None:
        return 1
    return max(1, last - first + 1)
