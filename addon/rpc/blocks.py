"""Facts about blocks, read once per call (pure; imports nothing of the addon).

* The block-hash pattern and height parsing (numbers, decimal or ``0x`` hex
  strings), the one place each is written.
* ``BlockFacts``: what a call's params say about blocks — the heights a
  ``chain_getBlockHash`` asks for, and which params are block hashes. Computed
  when the call is parsed (``jsonrpc.Call``) and read by routing hints,
  failover verdicts, the cache plan and the block index, so no stage parses
  the params again.
* ``BlockIndex``: hash -> height, learned from answers passing through, and
  whether the hash is the finalized chain's block at that height (known only
  for heights at or below finality: a read there has one right answer, which
  is what a cross-check compares).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol

PRUNING_WINDOW = 256  # blocks of state a non-archive Substrate node keeps
HASH_RE = re.compile(r"^0x[0-9a-fA-F]{64}$")
_HASH_LEN = 66
HEADER_METHODS = ("chain_getHeader", "chain_getBlock")  # answers that carry a header


def is_block_hash(value: Any) -> bool:
    return isinstance(value, str) and len(value) == _HASH_LEN and bool(HASH_RE.match(value))


def parse_height(v: Any) -> int | None:
    """A block number as clients send it (int, decimal or ``0x`` hex string) and as
    nodes answer it in headers (``0x`` hex)."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v if v >= 0 else None
    if isinstance(v, str) and _HEIGHT.fullmatch(v) is not None:
        # only what a node reads too: ``0x`` and hex digits, or decimal digits
        # (Python's ``int`` also takes spaces, ``_``, signs and other scripts'
        # digits, which would have been answered from the cache as that block)
        try:
            return int(v[2:], 16) if v[1:2] == "x" else int(v)
        except ValueError:  # past Python's 4,300 digits: no block's number
            return None
    return None


_HEIGHT = re.compile(r"0x[0-9a-fA-F]+|[0-9]+", re.ASCII)


def block_numbers(params: Any) -> list[int] | None:
    """The heights asked for by ``chain_getBlockHash`` params, or None when the
    call asks for the best block (no params) or the params are not heights (a
    second param too: a node refuses the call, so must the cache)."""
    if isinstance(params, dict) or not params or len(params) > 1:
        return None
    arg = params[0]
    values = arg if isinstance(arg, list) else [arg]
    out = []
    for v in values:
        n = parse_height(v)
        if n is None:
            return None
        out.append(n)
    return out


def answered_header(method: str, result: Any) -> Any:
    """The header inside a ``chain_getHeader`` / ``chain_getBlock`` result."""
    if method == "chain_getBlock":
        block = result.get("block") if isinstance(result, dict) else None
        return block.get("header") if isinstance(block, dict) else None
    return result


@dataclass(frozen=True, slots=True)
class BlockFacts:
    """What one call's params say about blocks."""

    heights: tuple[int, ...] | None = None  # chain_getBlockHash(n | [n, …])
    height_list: bool = False  # the heights came as a list: the answer is a list
    hashes: tuple[tuple[int | str, str], ...] = ()  # (param position or name, block hash)

    def hash_at(self, position: int | str) -> str | None:
        for pos, h in self.hashes:
            if pos == position:
                return h
        return None


NO_FACTS = BlockFacts()


def block_facts(method: str, params: Any) -> BlockFacts:
    if method == "chain_getBlockHash":
        heights = block_numbers(params)
        if heights is None:
            return NO_FACTS
        return BlockFacts(tuple(heights), isinstance(params[0], list))
    if isinstance(params, dict):
        pairs: Any = params.items()
    elif isinstance(params, list):
        pairs = enumerate(params)
    else:
        return NO_FACTS
    hashes = tuple((pos, v) for pos, v in pairs if is_block_hash(v))
    return BlockFacts(hashes=hashes) if hashes else NO_FACTS


class Called(Protocol):
    """A parsed call (``jsonrpc.Call``, which imports this module)."""

    @property
    def method(self) -> str: ...

    @property
    def facts(self) -> BlockFacts: ...


class BlockIndex:
    """hash -> height, learned from answers; bounded, least recently used first out.

    Beside the height, whether the hash is the canonical block at its height
    below finality (``canonical``: True, False, or None while nobody said):
    set from a ``chain_getBlockHash(n)`` answered with ``n`` at or below the
    finalized height, or by a finality look-up (``addon/chain/finality.py``).
    A height alone does not make a block final: a fork's block has a height too.
    """

    def __init__(self, max_entries: int = 20_000) -> None:
        self._map: OrderedDict[str, int] = OrderedDict()
        self._canonical: dict[str, bool] = {}  # only hashes in _map
        self.max_entries = max_entries

    def __len__(self) -> int:
        return len(self._map)

    def get(self, block_hash: str) -> int | None:
        key = block_hash.lower()
        h = self._map.get(key)
        if h is not None:
            self._map.move_to_end(key)
        return h

    def canonical(self, block_hash: str) -> bool | None:
        """Whether the hash is the finalized chain's block at its height (None: not known)."""
        return self._canonical.get(block_hash.lower())

    def put(self, block_hash: str, height: int, canonical: bool | None = None) -> None:
        """``canonical``: what is known of it (None keeps what was known of the
        same hash at the same height)."""
        key = block_hash.lower()
        if self._map.get(key) != height:
            self._canonical.pop(key, None)  # another height: what was said is void
        self._map[key] = height
        self._map.move_to_end(key)
        if canonical is not None:
            self._canonical[key] = canonical
        while len(self._map) > self.max_entries:
            old, _ = self._map.popitem(last=False)
            self._canonical.pop(old, None)

    def learn(self, call: Called, result: Any, finalized: int | None = None) -> None:
        """Remember what an answer to ``call`` says about hashes and heights;
        ``finalized``: the finalized height now (a hash answered for a height
        at or below it is that height's canonical block)."""
        method, facts = call.method, call.facts
        if facts.heights is not None:  # chain_getBlockHash(n…) -> hash(es)
            results = result if isinstance(result, list) else [result]
            for n, h in zip(facts.heights, results, strict=False):
                if is_block_hash(h):
                    final = finalized is not None and n <= finalized
                    self.put(h, n, True if final else None)
        elif method in HEADER_METHODS:
            asked = facts.hash_at(0)
            header = answered_header(method, result)
            number = parse_height(header.get("number")) if isinstance(header, dict) else None
            if asked is not None and number is not None:
                self.put(asked, number)
