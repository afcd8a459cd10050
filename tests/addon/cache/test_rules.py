"""What the edge cache keeps and under which key: a block hash per height, hash-pinned reads
with canonical params, never a null or the caller's id (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from addon.cache.rules import (
    MAX_CACHED_HEIGHTS,
    answer_from,
    canonical_text,
    entries_to_store,
    plan,
)
from addon.rpc.jsonrpc import Call

H = "0x" + "ab" * 32

EXTRA = {"state_getStorage": 1, "state_call": 2}


def p(method: str, params: Any, finalized: int | None = 100, net: str = "finney") -> Any:
    return plan(net, Call(1, method, params), extra=EXTRA, finalized=finalized)


@pytest.mark.parametrize("params", [[5], ["0x5"], [[5]], [["0x5"]]])
def test_block_hash_forms_share_one_entry_per_height(params: list[Any]) -> None:
    got = p("chain_getBlockHash", params)
    assert got is not None and got.keys == ("v1|finney|blockhash|5",)
    assert got.is_list == isinstance(params[0], list)


@pytest.mark.parametrize("params", [[5, "x"], [5, 1], [[5], None]])
def test_a_block_hash_call_with_a_second_param_is_not_cached(params: list[Any]) -> None:
    """A node refuses it (-32602, the method takes one): answered from height
    5's entry, it once got the hash where the node says invalid params."""
    assert p("chain_getBlockHash", params) is None


@pytest.mark.parametrize("params", [["5"], [[5, "6"]]])
def test_a_height_as_decimal_text_is_not_cached(params: list[Any]) -> None:
    """A node refuses ``"5"`` (a number or 0x hex), chopsticks answers its
    genesis placeholder: sharing height 5's entry once served that to
    ``chain_getBlockHash(5)`` callers, or a real hash to ``"5"``."""
    assert p("chain_getBlockHash", params) is None


def test_block_hash_list_is_one_entry_per_height_and_answers_a_list() -> None:
    got = p("chain_getBlockHash", [[1, "0x2", 3]])
    assert got is not None and len(got.keys) == 3
    assert answer_from(got, ["a", "b", "c"]) == ["a", "b", "c"]
    assert entries_to_store(got, ["a", None, "c"]) == [(got.keys[0], "a"), (got.keys[2], "c")]
    assert entries_to_store(got, ["a", "b"]) == []  # wrong length: nothing stored


def test_a_long_list_of_heights_goes_to_a_node() -> None:
    """Each height is a look-up on the event loop: a list of 50,000 cached
    heights held every other call for 10 to 15 s for 1 unit."""
    assert p("chain_getBlockHash", [list(range(MAX_CACHED_HEIGHTS))]) is not None
    assert p("chain_getBlockHash", [list(range(MAX_CACHED_HEIGHTS + 1))]) is None


@pytest.mark.parametrize(
    ("params", "finalized"),
    [([101], 100), ([[5, 101]], 100), ([5], None), ([], 100), ([-1], 100), (["zz"], 100)],
)
def test_block_hash_above_finality_or_unknown_finality_is_not_cached(
    params: list[Any], finalized: int | None
) -> None:
    assert p("chain_getBlockHash", params, finalized=finalized) is None


def test_hash_pinned_reads_are_cached_with_canonical_params() -> None:
    a = p("chain_getBlock", [H])
    b = p("chain_getBlock", [H.upper().replace("0X", "0x")])
    assert a is not None and b is not None and a.keys == b.keys
    assert p("chain_getHeader", [H]) is not None
    assert p("chain_getHeader", []) is None  # the head: not pinned
    assert p("chain_getBlock", ["0x1234"]) is None  # not a block hash
    assert p("state_getStorage", ["0xkey", H]) is not None
    assert p("state_getStorage", ["0x00"]) is None  # no block: the latest state
    assert p("state_getMetadata", [H]) is not None  # a hash-optional read at a hash
    assert p("state_getMetadata", []) is None  # at the head: not pinned, not cached
    assert p("state_call", ["Core_version", "0x", H]) is not None
    assert p("chain_getBlock", {"hash": H}) is None  # named params: not cached
    assert p("chain_getBlock", [H], net="test") != p("chain_getBlock", [H])


def test_null_and_the_id_never_enter_the_cache() -> None:
    got = p("chain_getBlock", [H])
    assert got is not None
    assert entries_to_store(got, None) == []
    one = plan("finney", Call(1, "chain_getBlock", [H]), extra=EXTRA, finalized=None)
    other = plan("finney", Call("x", "chain_getBlock", [H]), extra=EXTRA, finalized=None)
    assert one == other


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()  # past 64 bits too
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),  # non-ASCII, control characters, DEL
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@given(_JSON)
@example(["0x" + "ab" * 32, {"b": 1, "a": [None, True]}])
@example(["\x7f", "é", "\n\x00", 2**64, 1.5, {"é": 1, "e": 2}])
def test_the_key_text_is_the_stdlib_s_whatever_the_params(params: Any) -> None:
    """orjson's fast way may never change a key: keys are shared with earlier
    releases and other processes (disk, Redis)."""
    assert canonical_text(params) == json.dumps(params, sort_keys=True, separators=(",", ":"))
