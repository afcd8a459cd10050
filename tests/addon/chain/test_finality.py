"""Whether a block hash is final: what the block index says (pure), and the
look-up for a hash it cannot tell (a header that hashes to it, then whether
it is its height's canonical block), learned into the index."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from addon.chain.finality import (
    FINAL,
    LOOK_UP,
    NOT_FINAL,
    SKIPPED,
    UNKNOWN,
    FinalityLookups,
    verdict,
)
from addon.chain.header_hash import header_hash
from addon.rpc.blocks import BlockIndex
from addon.rpc.new_spec import CallFailed
from tests.addon.helpers import fork_header

FINALIZED = 100


def _block(n: int, fork: str = "a") -> tuple[str, dict[str, Any]]:
    header = fork_header(n, fork)
    h = header_hash(header)
    assert h is not None
    return h, header


def test_a_hash_is_final_only_canonical_at_or_below_finality() -> None:
    idx = BlockIndex()
    h90, _ = _block(90)
    assert verdict(idx, h90, FINALIZED) == LOOK_UP  # never seen: its height is not known
    assert verdict(idx, h90, None) == NOT_FINAL  # finality unknown: never final
    idx.put(h90, 90)
    assert verdict(idx, h90, FINALIZED) == LOOK_UP  # a height, but a fork has one too
    idx.put(h90, 90, canonical=True)
    assert verdict(idx, h90, FINALIZED) == FINAL
    assert verdict(idx, h90, 89) == NOT_FINAL  # (probes behind: not final for this proxy)
    h91, _ = _block(91, "b")
    idx.put(h91, 91, canonical=False)
    assert verdict(idx, h91, FINALIZED) == NOT_FINAL  # another block is that height's
    h101, _ = _block(101)
    idx.put(h101, 101)
    assert verdict(idx, h101, FINALIZED) == NOT_FINAL  # above finality: no look-up
    h102, _ = _block(102)
    assert verdict(idx, h102, FINALIZED, height=102) == NOT_FINAL  # the pinned head's height
    assert verdict(idx, h102, FINALIZED, height=99) == LOOK_UP


class Legacy:
    """chainproxy's own legacy calls, answered from a table; each call noted."""

    def __init__(self, answers: dict[tuple[str, Any], Any]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, Any]] = []
        self.gate: asyncio.Event | None = None

    async def call(self, network: str, method: str, params: list[Any]) -> Any:
        self.calls.append((method, params[0]))
        if self.gate is not None:
            await self.gate.wait()
        answer = self.answers.get((method, params[0]))
        if isinstance(answer, CallFailed):
            raise answer
        return answer


def _lookups(idx: BlockIndex, **kw: Any) -> tuple[FinalityLookups, Counter[str]]:
    outcomes: Counter[str] = Counter()
    return FinalityLookups(idx, count=lambda net, o: outcomes.update([o]), **kw), outcomes


async def _look_up(lookups: FinalityLookups, h: str, legacy: Legacy, **kw: Any) -> str | None:
    task = lookups.start("finney", h, legacy, lambda: FINALIZED, **kw)
    return None if task is None else await task


async def test_a_canonical_finalized_hash_is_learned_final() -> None:
    idx = BlockIndex()
    h, header = _block(90)
    legacy = Legacy({("chain_getHeader", h): header, ("chain_getBlockHash", 90): h})
    lookups, outcomes = _lookups(idx)
    assert await _look_up(lookups, h, legacy) == FINAL
    assert idx.get(h) == 90 and idx.canonical(h) is True
    assert verdict(idx, h, FINALIZED) == FINAL  # the next read needs no look-up
    assert outcomes == {FINAL: 1}
    assert legacy.calls == [("chain_getHeader", h), ("chain_getBlockHash", 90)]


async def test_a_forks_block_at_a_finalized_height_is_not_final() -> None:
    idx = BlockIndex()
    h, header = _block(90, "b")
    canonical, _ = _block(90)
    legacy = Legacy({("chain_getHeader", h): header, ("chain_getBlockHash", 90): canonical})
    lookups, _ = _lookups(idx)
    assert await _look_up(lookups, h, legacy) == NOT_FINAL
    # not remembered: the answer may be a liar's, until it is caught and purged
    assert idx.get(h) == 90 and idx.canonical(h) is None


async def test_above_finality_only_the_height_is_learned() -> None:
    idx = BlockIndex()
    h, header = _block(105)
    legacy = Legacy({("chain_getHeader", h): header})
    lookups, _ = _lookups(idx)
    assert await _look_up(lookups, h, legacy) == NOT_FINAL
    assert idx.get(h) == 105 and idx.canonical(h) is None  # may still be reorged
    assert legacy.calls == [("chain_getHeader", h)]


async def test_a_known_height_needs_only_the_canonical_block() -> None:
    idx = BlockIndex()
    h, _ = _block(90)
    idx.put(h, 90)  # a client asked chain_getHeader(h) through the proxy
    legacy = Legacy({("chain_getBlockHash", 90): h})
    lookups, _ = _lookups(idx)
    assert await _look_up(lookups, h, legacy) == FINAL
    assert legacy.calls == [("chain_getBlockHash", 90)]
    h2, _ = _block(91)
    legacy = Legacy({("chain_getBlockHash", 91): h2})
    assert await _look_up(lookups, h2, legacy, height=91) == FINAL  # the pinned head's height
    assert legacy.calls == [("chain_getBlockHash", 91)]


async def test_a_hash_no_node_knows_teaches_nothing() -> None:
    idx = BlockIndex()
    h, _ = _block(90)
    _, other_header = _block(90, "c")
    cases: list[Any] = [
        None,  # null: no node knows the hash
        CallFailed(-32603, "all 3 upstream attempt(s) failed"),
        other_header,  # another block's header: its number is not believed
        {"number": "0x5a"},  # not a header that can be hashed
    ]
    for answer in cases:
        lookups, outcomes = _lookups(idx)
        assert await _look_up(lookups, h, Legacy({("chain_getHeader", h): answer})) == UNKNOWN
        assert outcomes == {UNKNOWN: 1} and len(idx) == 0
    idx.put(h, 90)  # the height known, the canonical block not answered
    lookups, _ = _lookups(idx)
    for answer in (None, CallFailed(-32603, "no")):
        legacy = Legacy({("chain_getBlockHash", 90): answer})
        assert await _look_up(lookups, h, legacy) == UNKNOWN
        assert idx.canonical(h) is None


async def test_one_look_up_per_hash_in_flight_and_a_bound() -> None:
    idx = BlockIndex()
    h, header = _block(90)
    legacy = Legacy({("chain_getHeader", h): header, ("chain_getBlockHash", 90): h})
    legacy.gate = asyncio.Event()
    lookups, outcomes = _lookups(idx, max_running=2)
    first = lookups.start("finney", h, legacy, lambda: FINALIZED)
    again = lookups.start("finney", h.upper().replace("0X", "0x"), legacy, lambda: FINALIZED)
    assert first is not None and again is first  # every read at the hash shares it
    h2, _ = _block(91)
    assert lookups.start("finney", h2, legacy, lambda: FINALIZED) is not None
    h3, _ = _block(92)
    assert lookups.start("finney", h3, legacy, lambda: FINALIZED) is None  # past the bound
    assert outcomes == {SKIPPED: 1}
    legacy.gate.set()
    assert await first == FINAL
    await asyncio.sleep(0)  # the done callbacks ran: room again
    later = lookups.start("finney", h3, legacy, lambda: FINALIZED)
    assert later is not None
    assert await later == UNKNOWN  # (no header for it in the table)
