"""Which block a call is pinned to, for block-height-aware routing (pure).

* ``chain_getBlockHash(n)`` needs an upstream whose best block is >= n, and so
  does a call pinned to a block hash whose height is known (head pinning).
* A ``state_*`` read pinned to a block hash whose height is known and older
  than the pruning window should go to an archive upstream first. Heights of
  hashes are learned from answers passing through the proxy (clients usually
  ask ``chain_getBlockHash(n)`` before reading state at that hash) into the
  ``BlockIndex``.

The facts are read from each call's ``facts`` (parsed once, ``addon.rpc.blocks``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from addon.rpc.blocks import PRUNING_WINDOW, BlockIndex
from addon.rpc.jsonrpc import Call

_STATE_PREFIXES = ("state_", "childstate_")


@dataclass(frozen=True, slots=True)
class Hints:
    min_block: int | None = None
    prefer_archive: bool = False


def hints(calls: Sequence[Call], *, tip: int | None, index: BlockIndex) -> Hints:
    min_block: int | None = None
    archive = False
    for c in calls:
        facts = c.facts
        if facts.heights:
            top = max(facts.heights)
            min_block = top if min_block is None else max(min_block, top)
        elif facts.hashes:
            for _, block_hash in facts.hashes:
                height = index.get(block_hash)
                if height is None:
                    continue
                # a node behind this block cannot answer it (head-pinned reads above all)
                min_block = height if min_block is None else max(min_block, height)
                if tip is not None and c.method.startswith(_STATE_PREFIXES):
                    archive = archive or height < tip - PRUNING_WINDOW
    return Hints(min_block, archive)
