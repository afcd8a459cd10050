"""The hash of a Substrate header as a node returns it in JSON (pure).

A block's hash is blake2b-256 of its SCALE-encoded header: parentHash (32
bytes), number (compact), stateRoot, extrinsicsRoot (32 bytes each), digest
(compact count, then each log, which the JSON already carries as the hex of
its SCALE encoding). This holds for every chain on Substrate's default
``BlakeTwo256`` header, Bittensor's included.

Used to tell that an answer to ``chain_getHeader(hash)`` /
``chain_getBlock(hash)`` is not that block: chopsticks (a real runtime started
from a raw genesis) answers a hash it does not know with its genesis block
instead of ``null`` (and a real node never answers a hash with a block that
does not hash to it).
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from addon.rpc.blocks import answered_header, is_block_hash, parse_height

_HEX = re.compile(r"^0x(?:[0-9a-fA-F]{2})*$")


def compact(n: int) -> bytes:
    """SCALE compact encoding of a non-negative integer."""
    if n < 1 << 6:
        return bytes([n << 2])
    if n < 1 << 14:
        return ((n << 2) | 1).to_bytes(2, "little")
    if n < 1 << 30:
        return ((n << 2) | 2).to_bytes(4, "little")
    raw = n.to_bytes((n.bit_length() + 7) // 8, "little")
    return bytes([((len(raw) - 4) << 2) | 3]) + raw


def encode_header(header: Any) -> bytes | None:
    """The SCALE encoding of a JSON header (what ``chainHead_v1_header`` and
    ``archive_v1_header`` answer, hex-encoded), or None when it is not a
    header we can encode."""
    if not isinstance(header, dict):
        return None
    roots = [header.get(k) for k in ("parentHash", "stateRoot", "extrinsicsRoot")]
    number = parse_height(header.get("number"))
    digest = header.get("digest")
    logs = digest.get("logs") if isinstance(digest, dict) else None
    if number is None or not all(is_block_hash(r) for r in roots):
        return None
    if not isinstance(logs, list) or not all(isinstance(x, str) and _HEX.match(x) for x in logs):
        return None
    # is_block_hash checked each is a 0x-hex str; the checker cannot carry that over
    parent, state, extrinsics = (bytes.fromhex(r[2:]) for r in roots)  # type: ignore[index]
    return b"".join(
        [
            parent,
            compact(number),
            state,
            extrinsics,
            compact(len(logs)),
            *(bytes.fromhex(x[2:]) for x in logs),
        ]
    )


def header_hash(header: Any) -> str | None:
    """``0x…`` hash of a JSON header, or None when it is not a header we can encode
    (then nothing can be said about it)."""
    encoded = encode_header(header)
    if encoded is None:
        return None
    return "0x" + hashlib.blake2b(encoded, digest_size=32).hexdigest()


def is_other_genesis(method: str, requested: str, result: Any) -> bool:
    """True when the answer is a block #0 header that provably is not the block
    ``requested`` (its hash differs). Only block #0 is judged: that is what
    chopsticks answers for a hash it does not know, and hashing every header
    would wrongly reject the simulator's synthetic block hashes."""
    header = answered_header(method, result)
    if not isinstance(header, dict) or parse_height(header.get("number")) != 0:
        return False
    got = header_hash(header)
    return got is not None and got != requested.lower()
