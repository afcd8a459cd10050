"""Which block a call is pinned to, for block-height-aware routing (pure).

* ``chain_getBlockHash(n)`` needs an upstream whose best block is >= n.
* A ``state_*`` read pinned to a block hash whose height is known and older
  than the pruning window should go to an archive upstream first. Heights of
  hashes are learned from answers passing through the proxy (clients usually
  ask ``chain_getBlockHash(n)`` before reading state at that hash) into the
  ``BlockIndex``.

The facts are read from each call's ``facts`` (parsed once, ``addon.blocks``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from addon.blocks import PRUNING_WINDOW, BlockIndex
from addon.jsonrpc import Call

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
        elif facts.hashes and tip is not None and not archive:
            if not c.method.startswith(_STATE_PREFIXES):
                continue
            for _, block_hash in facts.hashes:
                height = index.get(block_hash)
                if height is not None and height < tip - PRUNING_WINDOW:
                    archive = True
                    break
    return Hints(min_block, archive)
