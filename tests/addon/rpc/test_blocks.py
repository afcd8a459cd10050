"""Block facts read from calls and answers: heights in params, the block numbers a
call names, and the hash -> height index learned from answers passing through, in
a bounded LRU."""

from __future__ import annotations

from typing import Any

import pytest

from addon.rpc.blocks import BlockIndex, block_numbers, parse_height
from addon.rpc.jsonrpc import Call


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (5, 5),
        (0, 0),
        ("0x5", 5),
        ("0x1F", 31),
        # what Python's int() reads but a node does not: not that block (it was
        # answered from the cache as if it were)
        ("0X1f", None),
        (" 5", None),
        ("5 ", None),
        ("1_000", None),
        ("0x3_d", None),
        ("+5", None),
        ("\u0665", None),  # ARABIC-INDIC DIGIT FIVE
        ("9" * 5000, None),  # past Python's 4,300 digits
        ("0x0", 0),
        ("5", 5),
        ("4096", 4096),
        (2**40, 2**40),
        (-1, None),
        ("-1", None),
        ("0x-5", None),
        (True, None),
        (False, None),
        ("garbage", None),
        ("0x", None),
        ("", None),
        ("0xzz", None),
        (1.5, None),
        (None, None),
        ([5], None),
        ({"n": 5}, None),
    ],
)
def test_parse_height(value: Any, expected: int | None) -> None:
    assert parse_height(value) == expected


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ([5], [5]),
        (["0x5"], [5]),
        (["5"], [5]),
        ([[1, "0x2"]], [1, 2]),
        ([[1, "0x2", "3"]], [1, 2, 3]),
        ([], None),
        ([None], None),
        ({"n": 5}, None),
        ([-1], None),
        ([True], None),
        (["garbage"], None),
        ([[1, "garbage"]], None),
        ([[1, -2]], None),
        ([5, "x"], None),  # a second param: the node refuses the call
    ],
)
def test_block_numbers(params: Any, expected: list[int] | None) -> None:
    assert block_numbers(params) == expected


def h(n: int) -> str:
    """A block hash (0x + 64 hex) made from a number."""
    return "0x" + f"{n:064x}"


def call(method: str, *params: Any, id_: Any = 1) -> Call:
    return Call(id_, method, list(params))


def header(n: int) -> dict[str, Any]:
    return {
        "parentHash": h(n - 1),
        "number": hex(n),
        "stateRoot": h(10**9 + n),
        "extrinsicsRoot": h(2 * 10**9 + n),
        "digest": {"logs": []},
    }


def test_learns_from_chain_get_block_hash_single() -> None:
    idx = BlockIndex()
    idx.learn(call("chain_getBlockHash", 77), h(77))
    idx.learn(call("chain_getBlockHash", "0x4e"), h(78))
    assert idx.get(h(77)) == 77 and idx.get(h(78)) == 78


def test_learns_from_chain_get_block_hash_list_skipping_nulls() -> None:
    idx = BlockIndex()
    idx.learn(call("chain_getBlockHash", [5, 6, 99999]), [h(5), h(6), None])
    assert idx.get(h(5)) == 5 and idx.get(h(6)) == 6
    assert len(idx) == 2


def test_does_not_learn_the_best_block_hash_without_a_height() -> None:
    idx = BlockIndex()
    idx.learn(call("chain_getBlockHash"), h(123))
    idx.learn(call("chain_getBlockHash", 5), None)  # a height the node does not have yet
    idx.learn(call("chain_getBlockHash", 6), "not a hash")
    assert len(idx) == 0


def test_learns_from_chain_get_header_by_hash() -> None:
    idx = BlockIndex()
    idx.learn(call("chain_getHeader", h(500)), header(500))
    assert idx.get(h(500)) == 500


def test_learns_from_chain_get_block_by_hash() -> None:
    idx = BlockIndex()
    answer = {"block": {"header": header(501), "extrinsics": ["0x00"]}, "justifications": None}
    idx.learn(call("chain_getBlock", h(501)), answer)
    assert idx.get(h(501)) == 501


def test_does_not_learn_from_unpinned_or_odd_header_answers() -> None:
    idx = BlockIndex()
    idx.learn(call("chain_getHeader"), header(9))  # the best header: no hash given
    idx.learn(call("chain_getHeader", h(9)), None)  # unknown block
    idx.learn(call("chain_getHeader", h(10)), {"number": "0xzz"})
    idx.learn(call("chain_getHeader", "0x1234"), header(11))  # not a block hash
    idx.learn(call("chain_getBlock", h(12)), {"block": {"extrinsics": []}})
    assert len(idx) == 0


@pytest.mark.parametrize("answer", [{"block": None}, {"block": "0x00"}])
def test_learn_never_raises_on_an_odd_block_answer(answer: Any) -> None:
    idx = BlockIndex()
    idx.learn(call("chain_getBlock", h(12)), answer)
    assert len(idx) == 0


def test_index_is_a_bounded_lru() -> None:
    idx = BlockIndex(max_entries=3)
    for n in (1, 2, 3):
        idx.put(h(n), n)
    assert idx.get(h(1)) == 1  # used: now the most recent
    idx.put(h(4), 4)
    assert len(idx) == 3
    assert idx.get(h(2)) is None  # the least recently used went first
    assert [idx.get(h(n)) for n in (1, 3, 4)] == [1, 3, 4]


def test_index_stays_bounded_under_many_learns() -> None:
    idx = BlockIndex(max_entries=100)
    for n in range(1000):
        idx.learn(call("chain_getBlockHash", n), h(n))
    assert len(idx) == 100
    assert idx.get(h(999)) == 999 and idx.get(h(0)) is None


def test_a_hash_answered_for_a_finalized_height_is_canonical() -> None:
    idx = BlockIndex()
    idx.learn(call("chain_getBlockHash", [90, 100, 101]), [h(90), h(100), h(101)], finalized=100)
    assert idx.canonical(h(90)) is True and idx.canonical(h(100)) is True
    assert idx.get(h(101)) == 101 and idx.canonical(h(101)) is None  # above finality: may reorg
    idx.learn(call("chain_getBlockHash", 5), h(5))  # finality unknown: nothing said
    assert idx.get(h(5)) == 5 and idx.canonical(h(5)) is None


def test_a_header_says_a_height_never_canonicality() -> None:
    idx = BlockIndex()
    idx.learn(call("chain_getHeader", h(500)), header(500))  # a fork's block has a height too
    assert idx.get(h(500)) == 500 and idx.canonical(h(500)) is None
    idx.put(h(500), 500, canonical=False)
    idx.learn(call("chain_getHeader", h(500)), header(500))  # the same again keeps it
    assert idx.canonical(h(500)) is False
    idx.put(h(500), 501)  # another height: what was said of it is void
    assert idx.canonical(h(500)) is None


def test_canonical_marks_leave_with_their_entries() -> None:
    idx = BlockIndex(max_entries=2)
    for n in (1, 2, 3):
        idx.put(h(n), n, canonical=True)
    assert idx.get(h(1)) is None and idx.canonical(h(1)) is None
    assert len(idx._canonical) == 2
