"""Whether a block hash is a finalized block, for any hash a client brings.

A read at a finalized block by hash has one right answer: that is what a
cross-check compares (``addon/upstream/cross_check.py``). A hash is final when
it is the canonical block at a height at or below the finalized height (the
probes'): a height alone is not enough, a fork's block has one too, and nodes
that never saw it answer it ``null`` where the ones that did answer it.

* ``verdict`` (pure): what the block index (``addon/rpc/blocks.py``) already
  says: ``FINAL``, ``NOT_FINAL``, or ``LOOK_UP`` when it cannot tell (a hash
  this proxy never saw a height for, or a height at or below finality nobody
  said is canonical).
* ``FinalityLookups``: the look-up, made with chainproxy's own legacy calls
  (``rpc.new_spec.LegacyCaller``: cache, routing, budgets, failover, like a
  client's miss): ``chain_getHeader(hash)`` for its height (believed only if
  the header hashes to the hash asked), then, at or below finality,
  ``chain_getBlockHash(height)`` for whether it is that height's block. Both
  answers are immutable and cached (the second once final). What is learned
  goes into the block index: the next read at that hash needs no look-up
  (another block at that height is not remembered: that answer may be a
  liar's, cached until it is caught; asked again it costs a cache hit). A
  node that does not know the hash teaches nothing; the read went on as it
  would have anyway.

One look-up per hash in flight (every read waiting on it shares it), at most
``max_running`` at once (beyond, the check of that read is skipped: the next
read at the hash tries again). Outcomes are counted in
``chainproxy_finality_lookups_total{network, outcome}``: ``final``,
``not-final``, ``unknown`` (no node told), ``skipped``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final, Protocol

from addon.chain.header_hash import header_hash
from addon.rpc.blocks import BlockIndex, is_block_hash, parse_height
from addon.rpc.new_spec import CallFailed, LegacyCaller

log = logging.getLogger("chainproxy.finality")

FINAL: Final = "final"
NOT_FINAL: Final = "not-final"
LOOK_UP: Final = "look-up"
UNKNOWN: Final = "unknown"  # a look-up no node answered
SKIPPED: Final = "skipped"  # too many look-ups in flight
MAX_RUNNING = 8  # look-ups in flight per process


def verdict(
    index: BlockIndex, block_hash: str, finalized: int | None, height: int | None = None
) -> str:
    """Whether reads at ``block_hash`` are reads at a finalized block, from what
    the index knows; ``height``: the hash's height when the caller knows it
    otherwise (the head a read was pinned to). Finality unknown: never final."""
    if finalized is None:
        return NOT_FINAL
    known = index.get(block_hash)
    n = known if known is not None else height
    if n is None:
        return LOOK_UP
    if n > finalized:
        return NOT_FINAL
    canonical = index.canonical(block_hash)
    if canonical is None:
        return LOOK_UP
    return FINAL if canonical else NOT_FINAL


class Counter(Protocol):
    def __call__(self, network: str, outcome: str) -> None: ...


class FinalityLookups:
    """Look-ups in flight, one per (network, hash)."""

    def __init__(
        self, index: BlockIndex, *, count: Counter, max_running: int = MAX_RUNNING
    ) -> None:
        self.index = index
        self.count = count
        self.max_running = max_running
        self._running: dict[tuple[str, str], asyncio.Task[str]] = {}

    def start(
        self,
        network: str,
        block_hash: str,
        legacy: LegacyCaller,
        finalized: Callable[[], int | None],
        *,
        height: int | None = None,
    ) -> asyncio.Task[str] | None:
        """The look-up of ``block_hash`` (the one in flight if there is one; its
        result: the verdict it ends on), or None when too many are in flight.
        ``finalized()``: the finalized height when it is needed."""
        key = (network, block_hash.lower())
        running = self._running.get(key)
        if running is not None:
            return running
        if len(self._running) >= self.max_running:
            self.count(network, SKIPPED)
            return None
        task = asyncio.ensure_future(self._look_up(network, key[1], legacy, finalized, height))
        self._running[key] = task
        task.add_done_callback(lambda _: self._running.pop(key, None))
        return task

    async def _look_up(
        self,
        network: str,
        block_hash: str,
        legacy: LegacyCaller,
        finalized: Callable[[], int | None],
        height: int | None,
    ) -> str:
        try:
            outcome = await self._learn(network, block_hash, legacy, finalized, height)
        except CallFailed:
            outcome = UNKNOWN  # no node answered it: nothing learned
        except Exception:  # a look-up is never the clients' problem
            log.exception("%s: finality look-up of %s failed", network, block_hash)
            outcome = UNKNOWN
        self.count(network, outcome)
        return outcome

    async def _learn(
        self,
        network: str,
        block_hash: str,
        legacy: LegacyCaller,
        finalized: Callable[[], int | None],
        height: int | None,
    ) -> str:
        n = self.index.get(block_hash)
        if n is None and height is None:
            header = await legacy.call(network, "chain_getHeader", [block_hash])
            if header_hash(header) != block_hash:
                return UNKNOWN  # not that block's header (or none): its height is not believed
            n = parse_height(header.get("number"))
            if n is None:  # (a header that hashes has a number: for the checker)
                return UNKNOWN
        n = n if n is not None else height
        assert n is not None
        self.index.put(block_hash, n)
        final = finalized()
        if final is None or n > final:
            return NOT_FINAL
        if self.index.canonical(block_hash) is None:
            at = await legacy.call(network, "chain_getBlockHash", [n])
            if not is_block_hash(at):
                return UNKNOWN
            if at.lower() != block_hash:
                # not remembered: that answer may be a liar's (cached until it
                # is caught and purged); asked again it is a cache hit
                return NOT_FINAL
            self.index.put(block_hash, n, canonical=True)
        return verdict(self.index, block_hash, final)
