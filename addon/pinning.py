"""Which block a call is pinned to, for block-height-aware routing (pure).

* ``chain_getBlockHash(n)`` needs an upstream whose best block is >= n.
* A ``state_*`` read pinned to a block hash whose height is known and older
  than the pruning window should go to an archive upstream first. Heights of
  hashes are learned from answers passing through the proxy (clients usually
  ask ``chain_getBlockHash(n)`` before reading state at that hash), in a
  bounded LRU.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from addon.failover import block_numbers, parse_height
from addon.jsonrpc import Call

PRUNING_WINDOW = 256  # blocks of state a non-archive Substrate node keeps
_HASH = re.compile(r"^0x[0-9a-fA-F]{64}$")
_STATE_PREFIXES = ("state_", "childstate_")


class BlockIndex:
    """hash -> height, learned from answers; bounded, least recently used first out."""

    def __init__(self, max_entries: int = 20_000) -> None:
        self._map: OrderedDict[str, int] = OrderedDict()
        self.max_entries = max_entries

    def __len__(self) -> int:
        return len(self._map)

    def get(self, block_hash: str) -> int | None:
        h = self._map.get(block_hash.lower())
        if h is not None:
            self._map.move_to_end(block_hash.lower())
        return h

    def put(self, block_hash: str, height: int) -> None:
        self._map[block_hash.lower()] = height
        self._map.move_to_end(block_hash.lower())
        while len(self._map) > self.max_entries:
            self._map.popitem(last=False)

    def learn(self, call: Call, result: Any) -> None:
        """Remember what an answer says about hashes and heights."""
        if call.method == "chain_getBlockHash":
            heights = block_numbers(call.params)
            results = result if isinstance(result, list) else [result]
            for n, h in zip(heights or (), results, strict=False):
                if isinstance(h, str) and _HASH.match(h):
                    self.put(h, n)
        elif call.method in ("chain_getHeader", "chain_getBlock") and isinstance(result, dict):
            params = call.params
            if not (isinstance(params, list) and params and isinstance(params[0], str)):
                return
            header: Any = result
            if "block" in result:
                block = result["block"]
                header = block.get("header") if isinstance(block, dict) else None
            number = parse_height(header.get("number")) if isinstance(header, dict) else None
            if number is not None and _HASH.match(params[0]):
                self.put(params[0], number)


@dataclass(frozen=True, slots=True)
class Hints:
    min_block: int | None = None
    prefer_archive: bool = False


def hints(calls: Sequence[Call], *, tip: int | None, index: BlockIndex) -> Hints:
    min_block: int | None = None
    archive = False
    for c in calls:
        if c.method == "chain_getBlockHash":
            heights = block_numbers(c.params)
            if heights:
                top = max(heights)
                min_block = top if min_block is None else max(min_block, top)
        elif c.method.startswith(_STATE_PREFIXES) and tip is not None and not archive:
            params = c.params.values() if isinstance(c.params, dict) else c.params
            for p in params:
                if isinstance(p, str) and _HASH.match(p):
                    height = index.get(p)
                    if height is not None and height < tip - PRUNING_WINDOW:
                        archive = True
                        break
    return Hints(min_block, archive)
