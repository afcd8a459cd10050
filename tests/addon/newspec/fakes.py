"""What the new-spec tests share: a Substrate trie built from key/value pairs
(its nodes, its root, and every node's full path and Merkle value, computed
apart from the decoder under test), and a ``LegacyCaller`` over a small chain
and its storage that records every legacy call."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from addon.chain.header_hash import header_hash
from addon.rpc.new_spec import CallFailed

Nibbles = tuple[int, ...]


def blake2(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=32).digest()


def compact(n: int) -> bytes:
    if n < 1 << 6:
        return bytes([n << 2])
    if n < 1 << 14:
        return ((n << 2) | 1).to_bytes(2, "little")
    return ((n << 2) | 2).to_bytes(4, "little")


def to_nibbles(key: bytes) -> Nibbles:
    return tuple(n for b in key for n in (b >> 4, b & 0x0F))


def _header(prefix: int, bits: int, count: int) -> bytes:
    """A node header: ``prefix`` in the top bits, then the nibble count."""
    mask = (1 << bits) - 1
    if count < mask:
        return bytes([prefix << bits | count])
    out, rest = [prefix << bits | mask], count - mask
    while rest >= 255:
        out.append(255)
        rest -= 255
    out.append(rest)
    return bytes(out)


def _partial(nibs: Nibbles) -> bytes:
    padded = ((0,) if len(nibs) % 2 else ()) + nibs
    return bytes(padded[i] << 4 | padded[i + 1] for i in range(0, len(padded), 2))


@dataclass
class Trie:
    """``entries`` as Substrate's trie (``hashed``: values over 32 bytes stored
    by hash, state version 1)."""

    entries: dict[bytes, bytes]
    hashed: bool = False
    nodes: list[bytes] = field(default_factory=list)  # every node stored by hash
    merkle: dict[Nibbles, bytes] = field(default_factory=dict)  # full path -> Merkle value
    root: bytes = b""

    def __post_init__(self) -> None:
        items = sorted((to_nibbles(k), v) for k, v in self.entries.items())
        encoded = self._encode(items, 0) if items else b"\x00"
        self.nodes.append(encoded)
        self.root = blake2(encoded)
        if items:
            self.merkle[self._top_path(items)] = self.root

    def _top_path(self, items: list[tuple[Nibbles, bytes]]) -> Nibbles:
        return items[0][0][: _common(items, 0)] if len(items) > 1 else items[0][0]

    def _value(self, value: bytes) -> tuple[bool, bytes]:
        if self.hashed and len(value) > 32:
            self.nodes.append(value)
            return True, blake2(value)
        return False, compact(len(value)) + value

    def _encode(self, items: list[tuple[Nibbles, bytes]], depth: int) -> bytes:
        if len(items) == 1:
            path, value = items[0]
            hashed, body = self._value(value)
            head = _header(0b001, 5, len(path) - depth) if hashed else None
            head = head or _header(0b01, 6, len(path) - depth)
            return head + _partial(path[depth:]) + body
        end = depth + _common(items, depth)
        partial = items[0][0][depth:end]
        own = [v for p, v in items if len(p) == end]
        value = b""
        if own:
            hashed, value = self._value(own[0])
            head = _header(0b0001, 4, len(partial)) if hashed else _header(0b11, 6, len(partial))
        else:
            head = _header(0b10, 6, len(partial))
        bitmap, refs = 0, b""
        for nib in range(16):
            group = [(p, v) for p, v in items if len(p) > end and p[end] == nib]
            if not group:
                continue
            bitmap |= 1 << nib
            child = self._encode(group, end + 1)
            ref = child if len(child) < 32 else blake2(child)
            if len(child) >= 32:
                self.nodes.append(child)
            refs += compact(len(ref)) + ref
            self.merkle[self._top_path(group)] = ref
        return head + _partial(partial) + bitmap.to_bytes(2, "little") + value + refs

    def closest(self, key: bytes) -> bytes | None:
        """The expected answer: the Merkle value of the node with the shortest
        full path that starts with ``key``."""
        want = to_nibbles(key)
        under = [p for p in self.merkle if p[: len(want)] == want]
        return self.merkle[min(under, key=len)] if under else None


def _common(items: list[tuple[Nibbles, bytes]], depth: int) -> int:
    """Nibbles all paths share from ``depth`` on."""
    first = items[0][0]
    n = 0
    while all(len(p) > depth + n and p[depth + n] == first[depth + n] for p, _ in items):
        n += 1
    return n


# --- a legacy caller over a small chain --------------------------------------------------


def hexed(b: bytes) -> str:
    return "0x" + b.hex()


class FakeLegacy:
    """``LegacyCaller`` over blocks 0..10 and one storage (``storage``: key ->
    value, 0x-hex) at each; ``child`` holds child tries by their unprefixed key.
    ``fail[method]``: raise that instead; every call lands in ``calls``."""

    def __init__(self, storage: dict[str, str] | None = None) -> None:
        self.storage = {k.lower(): v for k, v in (storage or {}).items()}
        self.child: dict[str, dict[str, str]] = {}
        self.calls: list[tuple[str, list[Any]]] = []
        self.fail: dict[str, CallFailed] = {}
        self.finalized = 8
        self.trie = Trie(
            {bytes.fromhex(k[2:]): bytes.fromhex(v[2:]) for k, v in self.storage.items()}
        )
        self.hashes: list[str] = []
        parent = "0x" + "00" * 32
        for n in range(11):
            h = header_hash(self.header_at(n, parent))
            assert h is not None
            self.hashes.append(h)
            parent = h

    def header_at(self, n: int, parent: str | None = None) -> dict[str, Any]:
        if parent is None:
            parent = self.hashes[n - 1] if n else "0x" + "00" * 32
        return {
            "parentHash": parent,
            "number": hex(n),
            "stateRoot": hexed(self.trie.root),
            "extrinsicsRoot": "0x" + f"{n:02x}" * 32,
            "digest": {"logs": ["0x0642414245b5010300000000"]},
        }

    def number(self, h: Any) -> int | None:
        return self.hashes.index(h) if h in self.hashes else None

    async def call(self, network: str, method: str, params: list[Any]) -> Any:
        self.calls.append((method, params))
        if method in self.fail:
            raise self.fail[method]
        return getattr(self, "_" + method)(*params)

    def methods(self) -> list[str]:
        return [m for m, _ in self.calls]

    def _known(self, at: str) -> None:
        if self.number(at) is None:
            raise CallFailed(4003, f"Client error: UnknownBlock: Header was not found: {at}")

    def _chain_getHeader(self, h: str) -> Any:
        n = self.number(h)
        return None if n is None else self.header_at(n)

    def _chain_getBlock(self, h: str) -> Any:
        n = self.number(h)
        if n is None:
            return None
        return {"block": {"header": self.header_at(n), "extrinsics": [f"0x0{n}", "0xabcd"]}}

    def _chain_getBlockHash(self, n: int) -> Any:
        return self.hashes[n] if n < len(self.hashes) else None

    def _chain_getFinalizedHead(self) -> str:
        return self.hashes[self.finalized]

    def _system_chain(self) -> str:
        return "Bittensor"

    def _system_properties(self) -> dict[str, Any]:
        return {"ss58Format": 42, "tokenDecimals": 9, "tokenSymbol": "TAO"}

    def _state_call(self, name: str, data: str, at: str) -> str:
        self._known(at)
        if name == "Panics_now":
            raise CallFailed(4003, "Client error: Execution failed: wasm trap: unreachable")
        return "0x" + hashlib.sha256(f"{name}{data}".encode()).hexdigest()[:16]

    def _state_queryStorageAt(self, keys: list[str], at: str) -> Any:
        self._known(at)
        return [{"block": at, "changes": [[k, self.storage.get(k.lower())] for k in keys]}]

    def _state_getStorage(self, key: str, at: str) -> Any:
        self._known(at)
        return self.storage.get(key.lower())

    def _state_getKeysPaged(self, prefix: str, count: int, start: str | None, at: str) -> Any:
        self._known(at)
        return _page(self.storage, prefix, count, start)

    def _childstate_getStorageEntries(self, child: str, keys: list[str], at: str) -> Any:
        self._known(at)
        trie = self.child.get(child, {})
        return [trie.get(k.lower()) for k in keys]

    def _childstate_getKeysPaged(
        self, child: str, prefix: str, count: int, start: str | None, at: str
    ) -> Any:
        self._known(at)
        return _page(self.child.get(child, {}), prefix, count, start)

    def _state_getReadProof(self, keys: list[str], at: str) -> Any:
        self._known(at)
        return {"at": at, "proof": [hexed(n) for n in self.trie.nodes]}


def _page(store: dict[str, str], prefix: str, count: int, start: str | None) -> list[str]:
    keys = sorted(k for k in store if k.startswith(prefix.lower()))
    return [k for k in keys if start is None or k > start.lower()][:count]
