"""The read subscriptions chainproxy serves, in Substrate's wire format (pure).

Each kind has one canonical subscribe method (what is sent upstream), its
aliases, its unsubscribe methods and the method name of its notifications.
Clients may use any alias; notifications carry the kind's method name, as a
Substrate node sends them whatever alias was used.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["new_heads", "all_heads", "finalized_heads", "runtime_version", "storage"]


@dataclass(frozen=True, slots=True)
class SubKind:
    kind: Kind
    subscribe: str  # canonical, sent upstream
    unsubscribe: str  # canonical, sent upstream
    notification: str
    aliases: tuple[str, ...] = ()  # other subscribe names clients use
    unsubscribe_aliases: tuple[str, ...] = ()

    @property
    def heads(self) -> bool:
        return self.kind in ("new_heads", "all_heads", "finalized_heads")


KINDS: tuple[SubKind, ...] = (
    SubKind(
        "new_heads",
        "chain_subscribeNewHeads",
        "chain_unsubscribeNewHeads",
        "chain_newHead",
        ("chain_subscribeNewHead", "subscribe_newHead"),
        ("chain_unsubscribeNewHead", "unsubscribe_newHead"),
    ),
    SubKind("all_heads", "chain_subscribeAllHeads", "chain_unsubscribeAllHeads", "chain_allHead"),
    SubKind(
        "finalized_heads",
        "chain_subscribeFinalizedHeads",
        "chain_unsubscribeFinalizedHeads",
        "chain_finalizedHead",
        ("chain_subscribeFinalisedHeads",),
        ("chain_unsubscribeFinalisedHeads",),
    ),
    SubKind(
        "runtime_version",
        "state_subscribeRuntimeVersion",
        "state_unsubscribeRuntimeVersion",
        "state_runtimeVersion",
        ("chain_subscribeRuntimeVersion",),
        ("chain_unsubscribeRuntimeVersion",),
    ),
    SubKind("storage", "state_subscribeStorage", "state_unsubscribeStorage", "state_storage"),
)

SUBSCRIBE: dict[str, SubKind] = {name: k for k in KINDS for name in (k.subscribe, *k.aliases)}
UNSUBSCRIBE: dict[str, SubKind] = {
    name: k for k in KINDS for name in (k.unsubscribe, *k.unsubscribe_aliases)
}
# Write subscriptions: refused with a reason, like every author_* call.
WRITE_SUBSCRIPTIONS = frozenset({"author_submitAndWatchExtrinsic", "author_unwatchExtrinsic"})

_HEX = re.compile(r"^0x[0-9a-fA-F]*$")
_MAX_STORAGE_KEYS = 1000


class BadParams(ValueError):
    pass


def canonical_params(kind: SubKind, params: Any) -> list[Any]:
    """The params sent upstream, in one canonical form, so that equal
    subscriptions share one upstream subscription (``BadParams`` if invalid).
    Storage keys are lower-cased, de-duplicated and sorted: a node's
    notification lists changes as ``[key, value]`` pairs, whatever the order
    they were asked in."""
    if kind.kind != "storage":
        if params in (None, [], {}):
            return []
        raise BadParams(f"{kind.subscribe} takes no params")
    keys: Any = params
    if isinstance(params, dict):
        keys = params.get("keys")
    elif isinstance(params, list) and len(params) == 1 and isinstance(params[0], list):
        keys = params[0]
    if keys in (None, []):
        # All storage changes: far too much for a shared public proxy.
        raise BadParams("state_subscribeStorage needs a non-empty list of storage keys")
    if not isinstance(keys, list) or not all(isinstance(k, str) and _HEX.match(k) for k in keys):
        raise BadParams("state_subscribeStorage takes a list of 0x-hex storage keys")
    if len(keys) > _MAX_STORAGE_KEYS:
        raise BadParams(f"at most {_MAX_STORAGE_KEYS} storage keys per subscription")
    return [sorted({k.lower() for k in keys})]


def share_key(network: str, kind: SubKind, params: list[Any]) -> str:
    return f"{network}|{kind.subscribe}|{json.dumps(params, separators=(',', ':'))}"


def notification(kind: SubKind, sub_id: str, result: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "method": kind.notification,
        "params": {"subscription": sub_id, "result": result},
    }
