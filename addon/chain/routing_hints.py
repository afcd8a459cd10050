"""Which block a call is pinned to, for block-height-aware routing (pure).

* ``chain_getBlockHash(n)`` needs an upstream whose best block is >= n, and so
  does a call pinned to a block hash whose height is known (head pinning).
* A call that reads the state at a block hash whose height is known
  (``needs_state``: ``state_*``, ``childstate_*``, runtime calls such as
  ``payment_*`` or subtensor's custom RPCs; not ``chain_getBlock`` /
  ``chain_getHeader``) needs an upstream that still holds that block's state:
  ``state_block``, the oldest such block of the calls, routed by the nodes'
  measured horizons (``addon/chain/horizons.py``). Heights of hashes are
  learned from answers passing through the proxy (clients usually ask
  ``chain_getBlockHash(n)`` before reading state at that hash) into the
  ``BlockIndex``.
* ``prefer_archive``: a ``state_*`` read at a known hash older than the
  pruning window, for when the horizons are not known (``state_block`` wins).

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
    state_block: int | None = None  # the oldest block whose state the calls read


def needs_state(method: str) -> bool:
    """Whether a call of ``method`` at a block hash reads that block's state:
    everything but the ``chain_*`` block and header reads."""
    return not method.startswith("chain_") or method == "chain_getRuntimeVersion"


def state_block(call: Call, index: BlockIndex) -> int | None:
    """The oldest block (of known height) whose state ``call`` reads, if any."""
    if not call.facts.hashes or not needs_state(call.method):
        return None
    heights = [index.get(h) for _, h in call.facts.hashes]
    known = [n for n in heights if n is not None]
    return min(known) if known else None


def hints(calls: Sequence[Call], *, tip: int | None, index: BlockIndex) -> Hints:
    min_block: int | None = None
    archive = False
    oldest: int | None = None
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
                if needs_state(c.method):
                    oldest = height if oldest is None else min(oldest, height)
    return Hints(min_block, archive, oldest)
