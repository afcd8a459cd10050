"""The hash of a Substrate header computed from its JSON (SCALE compact numbers,
blake2b), and which genesis answers are judged not to be the block asked for."""

from __future__ import annotations

from typing import Any

import pytest

from addon.chain.header_hash import compact, header_hash, is_other_genesis
from tests.addon.chopsticks_headers import BLOCK_2_HASH, BLOCK_2_HEADER, GENESIS_HEADER

GENESIS_REAL_HASH = header_hash(GENESIS_HEADER)


def block(header: dict[str, Any]) -> dict[str, Any]:
    return {"block": {"header": header, "extrinsics": []}, "justifications": None}


@pytest.mark.parametrize(
    ("n", "encoded"),
    [
        (0, "00"),
        (1, "04"),
        (63, "fc"),
        (64, "0101"),
        (16383, "fdff"),
        (16384, "02000100"),
        (2**30 - 1, "feffffff"),
        (2**30, "0300000040"),
        (2**32 - 1, "03ffffffff"),
    ],
)
def test_compact_encoding(n: int, encoded: str) -> None:
    assert compact(n).hex() == encoded


def test_header_hash_of_a_real_block_is_its_block_hash() -> None:
    assert header_hash(BLOCK_2_HEADER) == BLOCK_2_HASH
    as_int = {**BLOCK_2_HEADER, "number": 2}  # a plain integer number is tolerated
    assert header_hash(as_int) == BLOCK_2_HASH


@pytest.mark.parametrize(
    "header",
    [
        None,
        "0x00",
        {**BLOCK_2_HEADER, "number": "two"},
        {**BLOCK_2_HEADER, "stateRoot": "0x00"},
        {**BLOCK_2_HEADER, "digest": {}},
        {**BLOCK_2_HEADER, "digest": {"logs": ["0xabc"]}},
        {k: v for k, v in BLOCK_2_HEADER.items() if k != "parentHash"},
    ],
)
def test_a_header_that_cannot_be_encoded_has_no_hash(header: Any) -> None:
    assert header_hash(header) is None


def test_only_a_genesis_that_is_not_the_block_asked_for_is_judged() -> None:
    other = "0x" + "12" * 32
    assert is_other_genesis("chain_getHeader", other, GENESIS_HEADER)
    assert is_other_genesis("chain_getBlock", other, block(GENESIS_HEADER))
    assert GENESIS_REAL_HASH is not None
    assert not is_other_genesis("chain_getHeader", GENESIS_REAL_HASH.upper(), GENESIS_HEADER)
    # Blocks above 0 are not judged (the simulator's hashes are synthetic).
    assert not is_other_genesis("chain_getHeader", other, BLOCK_2_HEADER)
    assert not is_other_genesis("chain_getHeader", other, {**GENESIS_HEADER, "digest": None})
