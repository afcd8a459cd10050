"""A list of new-spec storage items answered at one block through legacy
calls: the one implementation behind ``archive_v1_storage`` (here) and
``chainHead_v1_storage`` (the follows).

``storage_items(legacy, network, at, queries, *, child_trie=None,
page_items=64)`` (``queries`` from ``parse_items``; ``storage_pages`` takes the
raw ``items`` and ``childTrie`` params instead) is an async iterator of pages:
lists of at most
``page_items`` result items, each ``{"key": …}`` with one of ``"value"``,
``"hash"`` or ``"closestDescendantMerkleValue"`` (the shape of a
``chainHead_v1_storage`` ``operationStorageItems`` item; an ``archive_v1_storage``
event adds ``"event": "storage"``). It fetches nothing until asked for the next
page, so a consumer may pause between pages (``operationWaitingForContinue``)
or stop (close it: ``aclose()``). A key without a value yields no item. A
legacy call that fails raises ``CallFailed`` (the node's code and message, or
chainproxy's own when no node answered); ``unknown_block`` (in
``translate.py``) tells a block no node knows.

* ``value`` / ``hash`` items: every key of the request in one
  ``state_queryStorageAt(keys, at)`` (1000 keys a call at most; a child trie:
  ``childstate_getStorageEntries``); a hash is blake2b-256 of the value, what
  Substrate's ``state_getStorageHash`` answers.
* ``descendantsValues`` / ``descendantsHashes``: ``state_getKeysPaged(key,
  100, start, at)`` pages (``childstate_getKeysPaged``), each page's values in
  one more call; ``paginationStartKey`` (archive) resumes after that key.
* ``closestDescendantMerkleValue``: one ``state_getReadProof(keys, at)``
  (``state_getChildReadProof``) walked from the block's state root
  (``trie_proof.py``); the root of a child trie is its main-trie value.

Items are answered value/hash first, then the Merkle values, then each
descendants item in request order (the spec leaves the order open).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from addon.newspec.translate import BadParams, block_hash, hex_bytes
from addon.newspec.trie_proof import ProofError, closest_descendant_merkle_value
from addon.quota.costs import DESCENDANTS_KEYS
from addon.rpc.jsonrpc import INTERNAL_ERROR
from addon.rpc.new_spec import CallFailed, LegacyCaller

VALUE, HASH, MERKLE = "value", "hash", "closestDescendantMerkleValue"
DESCENDANTS_VALUES, DESCENDANTS_HASHES = "descendantsValues", "descendantsHashes"
TYPES = (VALUE, HASH, MERKLE, DESCENDANTS_VALUES, DESCENDANTS_HASHES)
DESCENDANTS = (DESCENDANTS_VALUES, DESCENDANTS_HASHES)
MAX_QUERY_KEYS = 1000  # keys per state_queryStorageAt: bounds one answer's size
# the child tries of the "default" namespace, as the legacy childstate_* calls name them
CHILD_PREFIX = "0x" + b":child_storage:default:".hex()


@dataclass(frozen=True, slots=True)
class StorageQuery:
    key: str  # 0x-hex, lower case: what is read
    type: str  # one of TYPES
    start: str | None = None  # paginationStartKey: resume a descendants item after it
    asked: str = ""  # the key as the client spelled it, echoed in its items ("": ``key``)

    @property
    def echo(self) -> str:
        return self.asked or self.key


def parse_items(raw: Any, *, pagination: bool = False) -> list[StorageQuery]:
    """The ``items`` param (``BadParams``, -32602, when malformed);
    ``pagination``: ``paginationStartKey`` is read (archive_v1_storage; the
    chainHead items have none). Other fields of an item are ignored."""
    if not isinstance(raw, list):
        raise BadParams("items must be a list")
    out = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise BadParams(f"items[{i}] must be an object with key and type")
        kind = item.get("type")
        if kind not in TYPES:
            raise BadParams(f"items[{i}].type must be one of {', '.join(TYPES)}")
        start = item.get("paginationStartKey") if pagination else None
        if start is not None:
            if kind not in DESCENDANTS:
                raise BadParams(f"items[{i}].paginationStartKey is for descendants items only")
            start = hex_bytes(start, f"items[{i}].paginationStartKey")
        key = hex_bytes(item.get("key"), f"items[{i}].key")
        out.append(StorageQuery(key, kind, start, item["key"] if item["key"] != key else ""))
    return out


def child_key(raw: Any) -> str | None:
    """The ``childTrie`` param as the legacy childstate_* calls take it (the
    default namespace's prefix added); None for the main trie."""
    if raw is None:
        return None
    key = hex_bytes(raw, "childTrie")
    return key if key.startswith(CHILD_PREFIX) else CHILD_PREFIX + key[2:]


def value_hash(value: str) -> str:
    return "0x" + hashlib.blake2b(bytes.fromhex(value[2:]), digest_size=32).hexdigest()


async def storage_items(
    legacy: LegacyCaller,
    network: str,
    at: str,
    queries: Sequence[StorageQuery],
    *,
    child_trie: str | None = None,
    page_items: int = 64,
) -> AsyncIterator[list[dict[str, str]]]:
    """Pages of result items for ``queries`` at block ``at`` (see the module's
    docstring); ``child_trie``: the child trie's key as the client gave it."""
    reads = LegacyReads(legacy, network, block_hash(at), child_key(child_trie))
    page: list[dict[str, str]] = []
    direct = [q for q in queries if q.type in (VALUE, HASH)]
    keys = list(dict.fromkeys(q.key for q in direct))
    values: dict[str, str | None] = {}
    for n in range(0, len(keys), MAX_QUERY_KEYS):
        values.update(await reads.values(keys[n : n + MAX_QUERY_KEYS]))
    for q in direct:  # an item's key is the client's own spelling of it
        page.extend(_found(q.echo, values.get(q.key), q.type == HASH))
    merkle = [q for q in queries if q.type == MERKLE]
    if merkle:
        closest = await reads.merkle_values(list(dict.fromkeys(q.key for q in merkle)))
        page.extend({"key": q.echo, MERKLE: closest[q.key]} for q in merkle if q.key in closest)
    while len(page) >= page_items:
        yield page[:page_items]
        page = page[page_items:]
    for q in queries:
        if q.type not in DESCENDANTS:
            continue
        start = q.start
        if start is not None and not start.startswith(q.key):
            # outside the prefix: nodes list from it anyway (chopsticks does)
            if start[: len(q.key)] > q.key:
                continue  # after every key under the prefix: none left
            start = None  # before them all: from the first
        while True:
            listed = await reads.keys(q.key, start)
            # a node lists keys under the prefix; anything else is no descendant
            found = [k for k in listed if k.startswith(q.key)]
            got = await reads.values(found) if found else {}
            for k in found:
                page.extend(_found(k, got.get(k), q.type == DESCENDANTS_HASHES))
            while len(page) >= page_items:
                yield page[:page_items]
                page = page[page_items:]
            if len(listed) < DESCENDANTS_KEYS:
                break
            start = listed[-1]
    if page:
        yield page


def storage_pages(
    legacy: LegacyCaller,
    network: str,
    at: str,
    items: Any,
    child_trie: Any = None,
    *,
    page_items: int = 64,
) -> AsyncIterator[list[dict[str, str]]]:
    """``storage_items`` for the raw ``items`` and ``childTrie`` params of a
    ``chainHead_v1_storage`` call (``BadParams`` now if they are malformed)."""
    queries = parse_items(items)
    child_key(child_trie)
    return storage_items(legacy, network, at, queries, child_trie=child_trie, page_items=page_items)


def _found(key: str, value: str | None, hashed: bool) -> list[dict[str, str]]:
    if value is None:
        return []
    return [{"key": key, "hash": value_hash(value)} if hashed else {"key": key, "value": value}]


class LegacyReads:
    """The legacy calls of one request: main trie or one child trie."""

    def __init__(self, legacy: LegacyCaller, network: str, at: str, child: str | None) -> None:
        self.legacy, self.network, self.at, self.child = legacy, network, at, child

    async def _call(self, method: str, params: list[Any]) -> Any:
        return await self.legacy.call(self.network, method, params)

    async def values(self, keys: list[str]) -> dict[str, str | None]:
        if self.child is not None:
            got = await self._call("childstate_getStorageEntries", [self.child, keys, self.at])
            if not isinstance(got, list) or len(got) != len(keys):
                raise _malformed("childstate_getStorageEntries")
            return {k: _hex_or_none(v) for k, v in zip(keys, got, strict=True)}
        sets = await self._call("state_queryStorageAt", [keys, self.at])
        out: dict[str, str | None] = {}
        if not isinstance(sets, list):
            raise _malformed("state_queryStorageAt")
        for change_set in sets:  # one set (the block asked for); later sets win
            changes = change_set.get("changes") if isinstance(change_set, dict) else None
            if not isinstance(changes, list):
                raise _malformed("state_queryStorageAt")
            for pair in changes:
                if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str):
                    out[pair[0].lower()] = _hex_or_none(pair[1])
        return out

    async def keys(self, prefix: str, start: str | None) -> list[str]:
        if self.child is not None:
            params = [self.child, prefix, DESCENDANTS_KEYS, start, self.at]
            got = await self._call("childstate_getKeysPaged", params)
        else:
            got = await self._call("state_getKeysPaged", [prefix, DESCENDANTS_KEYS, start, self.at])
        if not isinstance(got, list) or not all(isinstance(k, str) for k in got):
            raise _malformed("state_getKeysPaged")
        return [k.lower() for k in got]

    async def merkle_values(self, keys: list[str]) -> dict[str, str]:
        """key -> the Merkle value of its closest descendant, for the keys that have one."""
        if self.child is not None:
            root_hex = await self._call("state_getStorage", [self.child, self.at])
            if root_hex is None:
                return {}  # no such child trie: nothing under any key
            method = "state_getChildReadProof"
            read = await self._call(method, [self.child, keys, self.at])
        else:
            header = await self._call("chain_getHeader", [self.at])
            if header is None:
                raise CallFailed(INTERNAL_ERROR, f"UnknownBlock: no node knows {self.at}")
            root_hex = header.get("stateRoot") if isinstance(header, dict) else None
            method = "state_getReadProof"
            read = await self._call(method, [keys, self.at])
        proof = read.get("proof") if isinstance(read, dict) else None
        if not isinstance(root_hex, str) or not isinstance(proof, list):
            raise _malformed(method)
        try:
            root = bytes.fromhex(root_hex[2:])
            nodes = [bytes.fromhex(n[2:]) for n in proof]
            out = {}
            for k in keys:
                found = closest_descendant_merkle_value(root, nodes, bytes.fromhex(k[2:]))
                if found is not None:
                    out[k] = "0x" + found.hex()
        except (ProofError, ValueError, TypeError) as e:
            raise CallFailed(INTERNAL_ERROR, f"{method}: the proof cannot be read ({e})") from e
        return out


def _hex_or_none(value: Any) -> str | None:
    return value.lower() if isinstance(value, str) else None


def _malformed(method: str) -> CallFailed:
    return CallFailed(INTERNAL_ERROR, f"{method}: the node's answer is not what it should be")
