"""The closest descendant's Merkle value read from a read proof, against tries
built by the test's own encoder (``fakes.Trie``): every key shape (a stored
key, a prefix ending inside a node's partial key or at a branch, a key past a
leaf, a missing branch), both state versions, long partial keys, an empty
trie, and a proof that lacks a node."""

from __future__ import annotations

import random

import pytest

from addon.newspec.trie_proof import ProofError, closest_descendant_merkle_value, decode
from tests.addon.newspec.fakes import Trie, blake2


def _entries(seed: int, n: int, hashed_values: bool) -> dict[bytes, bytes]:
    rng = random.Random(seed)
    out: dict[bytes, bytes] = {}
    prefixes = [bytes([rng.randrange(256) for _ in range(rng.randrange(1, 5))]) for _ in range(4)]
    for _ in range(n):
        key = rng.choice(prefixes) + bytes(rng.randrange(256) for _ in range(rng.randrange(0, 3)))
        size = rng.choice([1, 4, 31, 40]) if hashed_values else rng.choice([0, 1, 4])
        out[key] = bytes(rng.randrange(256) for _ in range(size))
    return out


def _probes(trie: Trie, rng: random.Random) -> list[bytes]:
    keys = list(trie.entries)
    out = [b""]
    for k in keys:
        out += [k, k[:-1], k[: len(k) // 2], k + b"\x00", k + b"\xff\x01"]
    out += [bytes([rng.randrange(256)]) for _ in range(8)]
    return out


@pytest.mark.parametrize("hashed", [False, True])
@pytest.mark.parametrize("seed", range(12))
def test_the_walk_finds_what_the_trie_holds(seed: int, hashed: bool) -> None:
    trie = Trie(_entries(seed, 3 + seed * 3, hashed), hashed=hashed)
    rng = random.Random(seed)
    found = 0
    for key in _probes(trie, rng):
        want = trie.closest(key)
        assert closest_descendant_merkle_value(trie.root, trie.nodes, key) == want, key.hex()
        found += want is not None
    assert found >= len(trie.entries)  # the test asked keys that are there, not only absent ones


def test_the_root_is_the_whole_tries_closest_descendant() -> None:
    trie = Trie({b"\x12\x34": b"\x01", b"\x12\x35": b"\x02"})
    assert closest_descendant_merkle_value(trie.root, trie.nodes, b"") == trie.root
    assert closest_descendant_merkle_value(trie.root, trie.nodes, b"\x12") == trie.root
    assert closest_descendant_merkle_value(trie.root, trie.nodes, b"\x13") is None


def test_long_partial_keys_use_the_continued_length() -> None:
    key = bytes(range(40))  # 80 nibbles: past the 6-bit length
    trie = Trie({key: b"\x07", key + b"\x01": b"\x08"})
    assert decode(trie.nodes[-1]) is not None
    assert closest_descendant_merkle_value(trie.root, trie.nodes, key[:33]) == trie.root
    assert closest_descendant_merkle_value(trie.root, trie.nodes, key + b"\x01") is not None


def test_an_empty_trie_has_no_descendant() -> None:
    trie = Trie({})
    assert trie.root == blake2(b"\x00")
    assert closest_descendant_merkle_value(trie.root, trie.nodes, b"\x01") is None


def test_a_proof_without_the_nodes_on_the_path_is_an_error() -> None:
    trie = Trie({bytes([i, j]): bytes(40) for i in range(4) for j in range(20)})
    with pytest.raises(ProofError):
        closest_descendant_merkle_value(trie.root, trie.nodes[-1:], b"\x02\x05")
    with pytest.raises(ProofError):
        closest_descendant_merkle_value(blake2(b"\x01"), [b"\x01"], b"")  # an unknown header


def test_the_encoding_is_substrates() -> None:
    # sp-trie's own codec tests (codec_trie_single_tuple,
    # codec_trie_two_tuples_disjoint_keys): the test's encoder writes the
    # bytes Substrate writes, so the decoder is checked against Substrate's layout
    assert Trie({b"\xaa": b"\xbb"}).nodes[-1] == bytes([0x42, 0xAA, 0x04, 0xBB])
    two = Trie({b"\x48\x19": b"\xfe", b"\x13\x14": b"\xff"})
    leaf_1 = [0x43, 0x03, 0x14, 0x04, 0xFF]
    leaf_4 = [0x43, 0x08, 0x19, 0x04, 0xFE]
    assert two.nodes[-1] == bytes([0x80, 0x12, 0x00, 0x14, *leaf_1, 0x14, *leaf_4])
    node = decode(two.nodes[-1])
    assert node is not None and node.children is not None
    assert [i for i, c in enumerate(node.children) if c] == [1, 4]
    assert closest_descendant_merkle_value(two.root, two.nodes, b"\x13") == bytes(leaf_1)
