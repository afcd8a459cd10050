"""The hash of a Substrate header computed from its JSON (SCALE compact numbers,
blake2b), and which genesis answers are judged not to be the block asked for."""

from __future__ import annotations

from typing import Any

import pytest

from addon.chain.header_hash import compact, header_hash, is_other_genesis

# Real answers of chopsticks 1.5.1 running Rococo Asset Hub from its raw genesis.
BLOCK_2_HASH = "0xaa0baf408616e5147ab6dffedca2230c82f9c30517e0e3c4e51e952f8beb3dcd"

BLOCK_2_HEADER = {
    "parentHash": "0x929d07dc84c2a680e287dd8f99a42b64376fde855c4c448d032d66c2914bfda5",
    "number": "0x00000002",
    "stateRoot": "0x" + "00" * 32,
    "extrinsicsRoot": "0x27c20cead9aa0da6e0237c95aa7ab4a3fb12b0f457dd1ba5724fb0db8810f828",
    "digest": {"logs": ["0x0661757261208fdaea0800000000"]},
}

# What chopsticks answers for ANY block hash it does not know: its genesis block,
# announced under a placeholder hash (0x45 x 32) that is not its real hash.
PLACEHOLDER = "0x" + "45" * 32

GENESIS_HEADER = {
    "parentHash": PLACEHOLDER,
    "number": "0x00000000",
    "stateRoot": "0x2e6fa4f052b8e1d06c046a4b765a82bed95dddf8b3ecce893794cbf5ad16d075",
    "extrinsicsRoot": "0x03170a2e7597b7b7e3d84c05391d139a62b157e78786d8c082f29dcf4c111314",
    "digest": {"logs": []},
}

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
