"""The ``chainHead_v1_followEvent`` notifications, in the spec's shapes (pure),
and the runtime object they carry, made from a legacy ``state_getRuntimeVersion``.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from addon.rpc.new_spec import FOLLOW_EVENT
from common.jsontext import dumps_text

Event = dict[str, Any]


def runtime_spec(version: Any) -> Any:
    """A legacy runtime version as the new spec's runtime object: ``apis`` an
    object of hex name hash → version, the fields the spec names. Anything
    that is not a runtime version is reported ``invalid`` (the spec's way of
    saying the runtime could not be read)."""
    if not isinstance(version, dict) or not isinstance(version.get("specVersion"), int):
        return {"type": "invalid", "error": "the node answered no runtime version"}
    apis: dict[str, int] = {}
    for entry in version.get("apis") or ():
        if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str):
            apis[entry[0]] = entry[1]
    spec = {
        "specName": version.get("specName"),
        "implName": version.get("implName"),
        "specVersion": version.get("specVersion"),
        "implVersion": version.get("implVersion"),
        "apis": apis,
    }
    if "transactionVersion" in version:
        spec["transactionVersion"] = version["transactionVersion"]
    return {"type": "valid", "spec": spec}


def initialized(finalized: list[str], runtime: Any | None, with_runtime: bool) -> Event:
    ev: Event = {"event": "initialized", "finalizedBlockHashes": finalized}
    if with_runtime:
        ev["finalizedBlockRuntime"] = runtime
    return ev


def new_block(block_hash: str, parent: str, new_runtime: Any, with_runtime: bool) -> Event:
    ev: Event = {"event": "newBlock", "blockHash": block_hash, "parentBlockHash": parent}
    if with_runtime:
        ev["newRuntime"] = new_runtime
    return ev


def best_changed(block_hash: str) -> Event:
    return {"event": "bestBlockChanged", "bestBlockHash": block_hash}


def finalized(hashes: list[str], pruned: list[str]) -> Event:
    return {"event": "finalized", "finalizedBlockHashes": hashes, "prunedBlockHashes": pruned}


STOP: Event = {"event": "stop"}


def operation(event: str, op_id: str, **fields: Any) -> Event:
    return {"event": event, "operationId": op_id, **fields}


def frame(follow_id: str, event: Event | str) -> bytes:
    """The notification as sent on the client's socket; ``event`` as a dict,
    or already encoded (one encoding shared by every follow it goes to)."""
    text = event if isinstance(event, str) else dumps_text(event)
    return (
        f'{{"jsonrpc":"2.0","method":"{FOLLOW_EVENT}",'
        f'"params":{{"subscription":{dumps_text(follow_id)},"result":{text}}}}}'
    ).encode()


@lru_cache(maxsize=256)
def best_changed_text(block_hash: str) -> str:
    return dumps_text(best_changed(block_hash))


@lru_cache(maxsize=256)
def finalized_text(hashes: tuple[str, ...], pruned: tuple[str, ...]) -> str:
    return dumps_text(finalized(list(hashes), list(pruned)))
