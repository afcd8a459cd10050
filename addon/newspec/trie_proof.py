"""The Merkle value of a key's closest descendant in Substrate's base-16
Patricia trie, read from a storage proof (pure).

The new spec's ``closestDescendantMerkleValue`` has no legacy RPC; a read
proof (``state_getReadProof(keys, at)``, ``state_getChildReadProof``) holds
every trie node a lookup of each key walks through, and that is enough: the
closest descendant of a key is the first node on its path whose full key
starts with it, and a node's Merkle value is what its parent holds for it (its
encoding when shorter than 32 bytes, else its blake2b-256 hash; the root's is
the state root). The node itself is not needed, only the path to it.

Node encoding (``sp-trie``'s ``NodeCodec``, both state versions): a header
byte (``01`` leaf, ``10`` branch, ``11`` branch with value, ``001`` leaf with
hashed value, ``0001`` branch with hashed value, ``00000000`` empty) whose
remaining bits start the partial key's nibble count (continued by bytes while
all ones / 255), the partial key (nibbles, high first, a leading zero nibble
pads an odd count), then for a branch a 16-bit little-endian child bitmap, the
value (a compact length and bytes, or a 32-byte hash), and each child present
(a compact length and bytes: 32 bytes is a hash, fewer an inline node).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

HASH_LEN = 32


class ProofError(ValueError):
    """A proof that does not hold the nodes the lookup needs, or is malformed."""


@dataclass(frozen=True, slots=True)
class Node:
    partial: tuple[int, ...]  # nibbles
    children: tuple[bytes | None, ...] | None  # a branch's 16 child references


def blake2_256(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=32).digest()


def nibbles(key: bytes) -> tuple[int, ...]:
    return tuple(n for b in key for n in (b >> 4, b & 0x0F))


def _compact(data: bytes, at: int) -> tuple[int, int]:
    """A SCALE compact integer at ``at``: (value, the offset after it)."""
    if at >= len(data):
        raise ProofError("truncated node")
    mode = data[at] & 0b11
    if mode == 0:
        return data[at] >> 2, at + 1
    if mode == 1:
        return int.from_bytes(data[at : at + 2], "little") >> 2, at + 2
    if mode == 2:
        return int.from_bytes(data[at : at + 4], "little") >> 2, at + 4
    size = (data[at] >> 2) + 4
    return int.from_bytes(data[at + 1 : at + 1 + size], "little"), at + 1 + size


def decode(data: bytes) -> Node | None:
    """One trie node; None for the empty trie's."""
    if not data:
        raise ProofError("empty node")
    first = data[0]
    if first == 0:
        return None
    top = first >> 6
    if top == 0b01:
        kind, bits = "leaf", 6
    elif top == 0b10:
        kind, bits = "branch", 6
    elif top == 0b11:
        kind, bits = "branch+value", 6
    elif first >> 5 == 0b001:
        kind, bits = "leaf+hash", 5
    elif first >> 4 == 0b0001:
        kind, bits = "branch+hash", 4
    else:
        raise ProofError(f"unknown node header {first:#04x}")
    mask = (1 << bits) - 1
    count, at = first & mask, 1
    if count == mask:  # continued: each further byte adds itself, 255 says more follows
        while True:
            if at >= len(data):
                raise ProofError("truncated node")
            count += data[at]
            at += 1
            if data[at - 1] < 255:
                break
    size = (count + 1) // 2
    raw = data[at : at + size]
    if len(raw) < size:
        raise ProofError("truncated node")
    at += size
    partial = nibbles(raw)[count % 2 :]  # an odd count: the first nibble is padding
    if kind.startswith("leaf"):
        return Node(partial, None)
    if at + 2 > len(data):
        raise ProofError("truncated node")
    bitmap = int.from_bytes(data[at : at + 2], "little")
    at += 2
    if kind == "branch+value":
        length, at = _compact(data, at)
        at += length
    elif kind == "branch+hash":
        at += HASH_LEN
    children: list[bytes | None] = []
    for i in range(16):
        if bitmap & (1 << i):
            length, at = _compact(data, at)
            ref = data[at : at + length]
            if len(ref) < length:
                raise ProofError("truncated node")
            children.append(ref)
            at += length
        else:
            children.append(None)
    return Node(partial, tuple(children))


def closest_descendant_merkle_value(
    root: bytes, proof: Iterable[bytes], key: bytes
) -> bytes | None:
    """The Merkle value of the closest descendant of ``key`` (the key's own
    node included) in the trie of ``root``; None when nothing in the trie
    starts with ``key``. ``ProofError`` when the proof lacks a node the walk
    needs."""
    nodes = {blake2_256(n): n for n in proof}
    want = nibbles(key)
    ref, depth = root, 0  # the Merkle value of the node at hand, and nibbles above it
    while True:
        data = ref if len(ref) < HASH_LEN else nodes.get(ref)
        if data is None:
            raise ProofError("the proof lacks a node on the key's path")
        node = decode(data)
        if node is None:
            return None  # the empty trie
        full = depth + len(node.partial)
        rest = want[depth:]
        # the key ends inside (or at the end of) this node's partial key: its subtree
        if len(rest) <= len(node.partial):
            return ref if node.partial[: len(rest)] == rest else None
        if rest[: len(node.partial)] != node.partial or node.children is None:
            return None  # the path leaves the key, or ends at a leaf short of it
        child = node.children[want[full]]
        if child is None:
            return None
        ref, depth = child, full + 1
