"""Metadata cached per runtime, not per block (pure).

``state_getMetadata`` (hundreds of KB on Bittensor) is the same for every
block of one runtime. The runtime of a block is what ``state_getRuntimeVersion``
at that block answered — clients ask it first (polkadot.js,
substrate-interface and async-substrate-interface all do, at the same hash
under head pinning), and the edge cache keeps that answer per block. So a
metadata read at block H whose runtime version at H is cached is answered from
the entry of that runtime (spec name + spec version), whichever block fetched
it first. A runtime upgrade needs no invalidation: the new blocks' runtime
version answers carry the new spec version, whose entry is empty until fetched.
"""

from __future__ import annotations

from typing import Any

from addon.cache.rules import KEY_VERSION, plan
from addon.cache.store import CacheStore
from addon.rpc.jsonrpc import Call

METADATA = "state_getMetadata"


def version_key(network: str, block_hash: str) -> str | None:
    """The cache key of ``state_getRuntimeVersion(block_hash)``."""
    p = plan(network, Call(None, "state_getRuntimeVersion", [block_hash]), extra={}, finalized=None)
    return p.keys[0] if p is not None else None


def runtime_key(network: str, version: Any) -> str | None:
    """The per-runtime metadata entry for a runtime version answer."""
    if not isinstance(version, dict):
        return None
    name, spec = version.get("specName"), version.get("specVersion")
    if not isinstance(name, str) or isinstance(spec, bool) or not isinstance(spec, int):
        return None
    return f"{KEY_VERSION}|{network}|metadata-by-runtime|{name}|{spec}"


def metadata_hash(call: Call) -> str | None:
    """The block a metadata read is pinned to (None: not pinned, not ours)."""
    if call.method != METADATA or not isinstance(call.params, list):
        return None
    return call.facts.hash_at(0)


def runtime_entry(network: str, call: Call, cache: CacheStore | None) -> str | None:
    """For a metadata read at a block whose runtime version is cached: the
    per-runtime entry it is answered from and stored under."""
    if cache is None:
        return None
    block_hash = metadata_hash(call)
    if block_hash is None:
        return None
    vkey = version_key(network, block_hash)
    return runtime_key(network, cache.get(vkey)) if vkey is not None else None
