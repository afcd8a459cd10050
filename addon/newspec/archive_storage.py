"""``archive_v1_storage`` and ``archive_v1_storageDiff`` as the current spec
has them: subscriptions on the client's socket. The call answers an operation
id; then each item found is one notification (``archive_v1_storageEvent``
``{"event": "storage", "key", "value" | "hash" |
"closestDescendantMerkleValue"[, "childTrieKey"]}``; ``archive_v1_storageDiffEvent``
``{"event": "storageDiff", …}``), and the operation ends with ``storageDone``
(``storageDiffDone``) or ``{"event": "storageError" | "storageDiffError",
"error"}``. ``archive_v1_stopStorage(id)`` (``_stopStorageDiff``) stops it
(null whatever the id, as the spec says). An operation whose socket is gone
stops at its next page."""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from addon.rpc.new_spec import CallFailed
from common.jsontext import dumps

log = logging.getLogger("chainproxy")

STORAGE_EVENT = "archive_v1_storageEvent"


@dataclass(frozen=True, slots=True)
class Events:
    """The names one kind of operation's notifications go by."""

    method: str  # the notifications' method
    item: str  # the event of one item found
    done: str
    error: str


STORAGE = Events(STORAGE_EVENT, "storage", "storageDone", "storageError")
DIFF = Events("archive_v1_storageDiffEvent", "storageDiff", "storageDiffDone", "storageDiffError")


@dataclass(slots=True)
class _Op:
    owner: object
    task: asyncio.Task[None] | None = None
    stopped: bool = field(default=False)


class StorageOperations:
    """One kind's operations in progress, by id, each with the socket that
    owns it (ids are unguessable: a socket stops only its own)."""

    def __init__(self, events: Events = STORAGE) -> None:
        self.events = events
        self._ops: dict[str, _Op] = {}
        self._per_owner: dict[int, int] = {}
        self._prefix = secrets.token_hex(4)
        self._ids = itertools.count(1)

    def __len__(self) -> int:
        return len(self._ops)

    def held(self, owner: object) -> int:
        """Operations ``owner`` has in progress."""
        return self._per_owner.get(id(owner), 0)

    def new_id(self) -> str:
        return f"archive-{self._prefix}-{next(self._ids)}-{secrets.token_hex(4)}"

    def start(
        self,
        op_id: str,
        owner: object,
        pages: AsyncIterator[list[dict[str, str]]],
        send: Callable[[bytes], None],
        live: Callable[[], bool],
        child_trie: str | None = None,
    ) -> None:
        """Run the operation ``op_id`` (its id already answered): its pages as
        notifications to ``send`` while ``live``."""
        op = _Op(owner)
        self._ops[op_id] = op
        self._per_owner[id(owner)] = self.held(owner) + 1
        op.task = asyncio.get_running_loop().create_task(
            self._run(op_id, op, pages, send, live, child_trie),
            name=f"chainproxy: {self.events.method}",
        )

    def stop(self, op_id: Any, owner: object) -> bool:
        """Stop ``owner``'s operation ``op_id``; False when it has none such."""
        op = self._ops.get(op_id) if isinstance(op_id, str) else None
        if op is None or op.owner is not owner:
            return False
        op.stopped = True
        if op.task is not None:
            op.task.cancel()
        self._forget(op_id, op)
        return True

    def release(self, owner: object) -> int:
        """Stop every operation of ``owner`` (its socket closed); how many."""
        mine = [op_id for op_id, op in self._ops.items() if op.owner is owner]
        for op_id in mine:
            self.stop(op_id, owner)
        return len(mine)

    def _forget(self, op_id: str, op: _Op) -> None:
        if self._ops.pop(op_id, None) is None:
            return
        left = self.held(op.owner) - 1
        if left > 0:
            self._per_owner[id(op.owner)] = left
        else:
            self._per_owner.pop(id(op.owner), None)

    async def _run(
        self,
        op_id: str,
        op: _Op,
        pages: AsyncIterator[list[dict[str, str]]],
        send: Callable[[bytes], None],
        live: Callable[[], bool],
        child_trie: str | None,
    ) -> None:
        events = self.events
        extra = {"childTrieKey": child_trie} if child_trie is not None else {}
        end: dict[str, Any] = {"event": events.done}
        try:
            async for page in pages:
                if op.stopped or not live():
                    return
                for item in page:
                    send(note(op_id, {"event": events.item, **item, **extra}, events.method))
        except CallFailed as e:
            end = {"event": events.error, "error": e.message}
        except Exception:  # a bug: the client hears of it, the operation ends
            log.exception("%s %s failed", events.method, op_id)
            end = {"event": events.error, "error": "internal proxy error"}
        finally:
            self._forget(op_id, op)
            await _close(pages)
        if not op.stopped and live():
            send(note(op_id, end, events.method))


async def _close(pages: AsyncIterator[Any]) -> None:
    aclose = getattr(pages, "aclose", None)
    if aclose is not None:
        await aclose()


def note(op_id: str, result: dict[str, Any], method: str = STORAGE_EVENT) -> bytes:
    params = {"subscription": op_id, "result": result}
    return dumps({"jsonrpc": "2.0", "method": method, "params": params})
