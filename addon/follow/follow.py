"""One client's ``chainHead_v1_follow``: the blocks it pinned, its operations,
and the events it is sent, from the network's view (``view.py``), never from
one node, so that a node's death is invisible to it.

Until the client has the follow's id (``greet``), its events wait, as a
node never sends a notification before the answer that names it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from addon.follow import events
from addon.follow.tree import Block, BlockTree
from common.jsontext import dumps_text

log = logging.getLogger("chainproxy.follow")


@dataclass(slots=True)
class Operation:
    """One operation in flight: its task, and, for a paged storage read, the
    event its next page waits on (``chainHead_v1_continue``)."""

    op_id: str
    kind: str  # body, call, storage
    slots: int  # operations it counts as (a storage read: one per item)
    task: asyncio.Task[None] | None = None
    waiting: bool = False
    resume: asyncio.Event = field(default_factory=asyncio.Event)


class Follow:
    def __init__(
        self,
        follow_id: str,
        network: str,
        owner: Any,
        send: Callable[[bytes], None],
        *,
        with_runtime: bool,
        max_pinned: int,
        max_operations: int,
        on_end: Callable[[Follow, str], None],
    ) -> None:
        self.id = follow_id
        self.network = network
        self.owner = owner  # the client socket
        self.with_runtime = with_runtime
        self.max_pinned = max_pinned
        self.max_operations = max_operations
        self.pinned: set[str] = set()
        # the headers of pinned blocks, as announced: ``chainHead_v1_header``
        # answers from here, whichever node is alive (shared strings, no copies)
        self.headers: dict[str, str] = {}
        # the blocks announced (newBlock) and not finalized or pruned yet: those
        # a ``finalized`` event must name as pruned, pinned still or not
        self.announced: set[str] = set()
        self.operations: dict[str, Operation] = {}
        self.ended = False
        self._send = send
        self._on_end = on_end
        self._ready = False
        self._backlog: list[bytes] = []
        self._next_op = 0
        self._unfinalized: Callable[[], int] = lambda: 0

    # --- sending ------------------------------------------------------------------------

    def greet(self) -> None:
        """The client has the follow's id: what waited is sent."""
        self._ready = True
        backlog, self._backlog = self._backlog, []
        for frame in backlog:
            self._deliver(frame)

    def emit(self, event: events.Event | str) -> None:
        if self.ended and event is not events.STOP:
            return
        frame = events.frame(self.id, event)
        if self._ready:
            self._deliver(frame)
        else:
            self._backlog.append(frame)

    def _deliver(self, frame: bytes) -> None:
        try:
            self._send(frame)
        except Exception:  # a closing socket: its release ends the follow
            log.debug("follow %s: send failed", self.id, exc_info=True)

    # --- the view's events (``view.Listener``) -----------------------------------------

    def start(self, tree: BlockTree) -> None:
        """The tree as it is now: ``initialized``, a ``newBlock`` per block
        above the finalized one (parent first), the best block."""
        self._unfinalized = lambda: len(tree.blocks) - 1
        finalized = list(tree.recent)
        self.pinned.update(finalized)
        self.headers.update(tree.recent_headers)
        self.emit(events.initialized(finalized, tree.root.runtime, self.with_runtime))
        for block in tree.unfinalized():
            parent = tree.blocks[block.parent]
            changed = block.runtime if block.runtime != parent.runtime else None
            self._announce(block, changed)
        self.emit(events.best_changed(tree.best))

    def new_block(self, block: Block, new_runtime: Any) -> None:
        self._announce(block, new_runtime)
        # the spec's advice: bound the pinned *finalized* blocks, so a chain
        # whose finality stalls does not kill every follow
        if len(self.pinned) - self._unfinalized() > self.max_pinned:
            self.stop(f"more than {self.max_pinned} finalized blocks pinned")

    def _announce(self, block: Block, new_runtime: Any) -> None:
        self.pinned.add(block.hash)
        self.announced.add(block.hash)
        if block.header is not None:
            self.headers[block.hash] = block.header
        text = block.texts.get(self.with_runtime)
        if text is None:  # encoded once per block and kind of follow, not per follow
            ev = events.new_block(block.hash, block.parent, new_runtime, self.with_runtime)
            text = block.texts[self.with_runtime] = dumps_text(ev)
        self.emit(text)

    def best_changed(self, block_hash: str) -> None:
        self.emit(events.best_changed_text(block_hash))

    def finalized(self, hashes: list[str], pruned: list[str]) -> None:
        # only what this follow was told of (a block pruned before it started
        # was never announced to it), whether the client unpinned it or not
        announced = self.announced
        told = tuple(h for h in pruned if h in announced)
        announced.difference_update(hashes)
        announced.difference_update(pruned)
        self.emit(events.finalized_text(tuple(hashes), told))

    def stop(self, reason: str) -> None:
        """The follow cannot go on: ``stop`` sent, operations ended."""
        if self.ended:
            return
        self.emit(events.STOP)
        self.end(reason)

    def end(self, reason: str) -> None:
        """Gone (unfollowed, stopped, or its socket closed): no more events."""
        if self.ended:
            return
        self.ended = True
        for op in self.operations.values():
            if op.task is not None:
                op.task.cancel()
        self.operations.clear()
        self.pinned.clear()
        self.headers.clear()
        self._on_end(self, reason)

    # --- pins and operations ------------------------------------------------------------

    def unpin(self, hashes: list[str]) -> None:
        for h in hashes:
            self.pinned.discard(h)
            self.headers.pop(h, None)

    def free_slots(self) -> int:
        return self.max_operations - sum(op.slots for op in self.operations.values())

    def new_operation(self, kind: str, slots: int) -> Operation:
        self._next_op += 1
        op = Operation(f"{self._next_op}", kind, slots)
        self.operations[op.op_id] = op
        return op

    def finish(self, op: Operation, event: events.Event | None) -> None:
        """The operation ended: its last event (None: stopped, nothing sent)."""
        if self.operations.pop(op.op_id, None) is None:
            return  # stopped meanwhile: the client asked for no more events
        if event is not None:
            self.emit(event)
