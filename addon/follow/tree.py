"""One network's block tree as this proxy sees it (pure): what a
``chainHead_v1_follow`` reports, whichever node fed it.

* Blocks are added parent first: a block whose parent is unknown is refused
  (the view fetches the missing ancestors by hash first), so every block's
  parent is known before the block is announced.
* The root is the finalized block; blocks below it are gone, except the hashes
  of the last few finalized blocks (``recent``), which a new follow is given in
  its ``initialized`` event, as a node does.
* Finalizing a descendant finalizes the path up to it and prunes every block
  that is not its descendant (forks that lost).
* Each block carries the runtime it runs (the new spec's ``spec`` object):
  the parent's unless the view fetched another one for it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

RECENT_FINALIZED = 5  # finalized hashes given to a new follow (about a minute of blocks)


@dataclass(slots=True)
class Block:
    hash: str
    parent: str
    number: int
    runtime: Any = None  # the new spec's runtime object (None: not known)
    # its SCALE-encoded header (hex), as the nodes announced it: what
    # ``chainHead_v1_header`` answers while the block is pinned, even once no
    # live node has the block (its only holder died, a fork was abandoned)
    header: str | None = None
    children: list[str] = field(default_factory=list)
    # its newBlock event, encoded once for every follow (by withRuntime)
    texts: dict[bool, str] = field(default_factory=dict)


class UnknownParent(ValueError):
    pass


class BlockTree:
    def __init__(self, root: Block) -> None:
        self.blocks: dict[str, Block] = {root.hash: root}
        self.finalized = root.hash
        self.best = root.hash
        self.recent: deque[str] = deque([root.hash], maxlen=RECENT_FINALIZED)
        # the headers of ``recent`` (those known): a new follow pins those blocks
        self.recent_headers: dict[str, str] = {}
        if root.header is not None:
            self.recent_headers[root.hash] = root.header

    @property
    def root(self) -> Block:
        return self.blocks[self.finalized]

    def __contains__(self, block_hash: str) -> bool:
        return block_hash in self.blocks

    def get(self, block_hash: str) -> Block | None:
        return self.blocks.get(block_hash)

    def add(self, block: Block) -> bool:
        """Add a block whose parent is in the tree; False when it already is.
        A block at or below the finalized height is refused: it cannot be a
        descendant of the finalized block."""
        if block.hash in self.blocks:
            return False
        parent = self.blocks.get(block.parent)
        if parent is None or block.number != parent.number + 1:
            raise UnknownParent(f"parent {block.parent} of #{block.number} is not in the tree")
        if block.runtime is None:
            block.runtime = parent.runtime
        parent.children.append(block.hash)
        self.blocks[block.hash] = block
        return True

    def set_best(self, block_hash: str) -> bool:
        """True when the best block changed."""
        if block_hash not in self.blocks or block_hash == self.best:
            return False
        self.best = block_hash
        return True

    def finalize(self, block_hash: str) -> tuple[list[str], list[str]]:
        """Finalize ``block_hash`` (a descendant of the finalized block): the
        newly finalized hashes (increasing numbers, the new finalized last) and
        the pruned hashes. Nothing when it is the finalized block already."""
        if block_hash == self.finalized:
            return [], []
        if block_hash not in self.blocks:
            raise UnknownParent(f"block {block_hash} to finalize is not in the tree")
        path: list[str] = []
        h = block_hash
        while h != self.finalized:
            path.append(h)
            h = self.blocks[h].parent  # KeyError: not a descendant, cannot happen (add checks)
        path.reverse()
        keep = set(self.descendants(block_hash))
        keep.add(block_hash)
        old_root = self.finalized
        pruned = [h for h in self.blocks if h not in keep and h not in path and h != old_root]
        headers = self.recent_headers
        for h in path:
            header = self.blocks[h].header
            if header is not None:
                headers[h] = header
        for h in (*pruned, old_root, *path[:-1]):
            self.blocks.pop(h, None)
        root = self.blocks[block_hash]
        self.finalized = block_hash
        self.recent.extend(path)
        for h in [h for h in headers if h not in self.recent]:
            del headers[h]
        if self.best not in self.blocks:
            # the best block was on a fork that lost: the new finalized block
            # is the best known until a descendant is announced
            self.best = max(keep, key=lambda x: self.blocks[x].number, default=root.hash)
        return path, pruned

    def descendants(self, block_hash: str) -> list[str]:
        """Every descendant of ``block_hash``, each after its parent."""
        out: list[str] = []
        todo = deque(self.blocks[block_hash].children)
        while todo:
            h = todo.popleft()
            if h not in self.blocks:
                continue
            out.append(h)
            todo.extend(self.blocks[h].children)
        return out

    def unfinalized(self) -> list[Block]:
        """The blocks above the finalized one, each after its parent (what a
        new follow is told with ``newBlock`` events)."""
        return [self.blocks[h] for h in self.descendants(self.finalized)]

    def path_to(self, block_hash: str) -> list[str]:
        """Hashes from the finalized block (excluded) to ``block_hash``."""
        path: list[str] = []
        h = block_hash
        while h != self.finalized:
            path.append(h)
            h = self.blocks[h].parent
        path.reverse()
        return path
