"""Which reads take a block hash as an optional last parameter, and pinning one
of them to a given block (pure).

A hash-optional state read sent without a hash is answered by a node at its
best block; sent with the hash of the network's best block it gets the same
answer, but is now block-pinned: cacheable, shareable, and routed only to
nodes that have that block. ``chain_getHeader`` / ``chain_getBlock`` /
``chain_getBlockHash`` are not pinned here: they are how clients (and this
proxy) learn the head. Without a hash or number, while a subscription
follows the head, they are ``head_answer``'s (``addon/steps/pin_to_head.py``).
"""

from __future__ import annotations

from collections.abc import Mapping

from addon.rpc.jsonrpc import Call

# method -> position of its optional block-hash parameter (Substrate's RPC)
HASH_POSITION: Mapping[str, int] = {
    "state_getStorage": 1,
    "state_getStorageAt": 1,
    "state_getStorageHash": 1,
    "state_getStorageHashAt": 1,
    "state_getStorageSize": 1,
    "state_getStorageSizeAt": 1,
    "state_getKeys": 1,
    "state_getKeysPaged": 3,
    "state_getKeysPagedAt": 3,
    "state_getPairs": 1,
    "state_queryStorageAt": 1,
    "state_getReadProof": 1,
    "state_getChildReadProof": 2,
    "state_call": 2,
    "state_callAt": 2,
    "state_getRuntimeVersion": 0,
    "chain_getRuntimeVersion": 0,
    "state_getMetadata": 0,
    "childstate_getStorage": 2,
    "childstate_getStorageHash": 2,
    "childstate_getStorageSize": 2,
    "childstate_getStorageEntries": 2,
    "childstate_getKeys": 2,
    "childstate_getKeysPaged": 4,
    "payment_queryInfo": 1,
    "payment_queryFeeDetails": 1,
}


# the parameters before the hash that may be left out (the start key of a page)
_OPTIONAL_BEFORE: Mapping[str, int] = {
    "state_getKeysPaged": 1,
    "state_getKeysPagedAt": 1,
    "childstate_getKeysPaged": 1,
}


def pin(call: Call, block_hash: str, exclude: frozenset[str] = frozenset()) -> Call | None:
    """``call`` with ``block_hash`` as its block parameter, or None when it is not
    a hash-optional read sent without a hash (then it is left as it is)."""
    position = HASH_POSITION.get(call.method)
    if position is None or call.method in exclude:
        return None
    params = call.params
    if not isinstance(params, list) or len(params) > position + 1:
        return None  # named params, or more than the method takes: the node will say
    if len(params) == position + 1 and params[position] is not None:
        return None  # already says which block
    if len(params) < position - _OPTIONAL_BEFORE.get(call.method, 0):
        return None  # a required param is missing: the node's error, unchanged
    before = params[:position] + [None] * (position - len(params[:position]))
    return Call(call.id, call.method, [*before, block_hash])
