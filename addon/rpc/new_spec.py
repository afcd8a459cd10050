"""Substrate's new JSON-RPC interface (paritytech/json-rpc-interface-spec):
its method names, the families chainproxy serves and the error codes the
spec gives them (pure vocabulary).

* ``chainHead_v1_*``: a follow and the operations on its pinned blocks,
  served over WebSocket by chainproxy itself from its own view of the chain
  (``addon/follow/``), never tied to one node.
* ``archive_v1_*`` and ``chainSpec_v1_*``: stateless reads, answered from
  legacy calls on any suitable node, cached and balanced like them.
* ``transaction_v1_*`` / ``transactionWatch_v1_*``: writes, refused like
  ``author_*``.
"""

from __future__ import annotations

from typing import Any, Protocol

CHAIN_HEAD_FOLLOW = "chainHead_v1_follow"
CHAIN_HEAD_UNFOLLOW = "chainHead_v1_unfollow"
FOLLOW_EVENT = "chainHead_v1_followEvent"  # the notifications' method

CHAIN_HEAD: tuple[str, ...] = (
    CHAIN_HEAD_FOLLOW,
    CHAIN_HEAD_UNFOLLOW,
    "chainHead_v1_header",
    "chainHead_v1_body",
    "chainHead_v1_call",
    "chainHead_v1_storage",
    "chainHead_v1_continue",
    "chainHead_v1_stopOperation",
    "chainHead_v1_unpin",
)
ARCHIVE: tuple[str, ...] = (
    "archive_v1_body",
    "archive_v1_call",
    "archive_v1_finalizedHeight",
    "archive_v1_genesisHash",
    "archive_v1_hashByHeight",
    "archive_v1_header",
    "archive_v1_storage",
    "archive_v1_stopStorage",
    "archive_v1_storageDiff",
    "archive_v1_stopStorageDiff",
)
CHAIN_SPEC: tuple[str, ...] = (
    "chainSpec_v1_chainName",
    "chainSpec_v1_genesisHash",
    "chainSpec_v1_properties",
)
# writes of the new spec: refused like author_* (a read-only proxy)
TRANSACTION: tuple[str, ...] = (
    "transaction_v1_broadcast",
    "transaction_v1_stop",
    "transactionWatch_v1_submitAndWatch",
    "transactionWatch_v1_unwatch",
)

# error codes of the spec (chainHead_v1_*)
INVALID_BLOCK = -32801  # a hash not reported by the follow, or unpinned
NO_RUNTIME = -32802  # chainHead_v1_call on a follow without withRuntime
NOT_WAITING = -32803  # continue on an operation that is not waiting for it
DUPLICATE_HASHES = -32804  # unpin with a hash twice


class CallFailed(Exception):
    """A legacy call made on a client's behalf did not get a result: the
    JSON-RPC error it got (a node's, or chainproxy's own when no node could
    answer)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.data = data

    def error(self) -> dict[str, Any]:
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            err["data"] = self.data
        return err


class LegacyCaller(Protocol):
    """Legacy calls made by chainproxy itself (a chainHead operation, an
    archive read, the chain view's ancestry): through the cache, coalescing,
    routing, budgets and failover every client call takes, with no quota
    charged (the client's call that caused it was). Raises ``CallFailed``."""

    async def call(self, network: str, method: str, params: list[Any]) -> Any: ...
