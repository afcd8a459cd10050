"""``archive_v1_storageDiff`` through legacy calls: what changed under some
key prefixes between two blocks.

``parse_diff_items`` reads the ``items`` param (none: the whole main trie,
values); ``storage_diff(legacy, network, at, previous, items)`` is an async
iterator of pages of ``storageDiff`` events ``{"event": "storageDiff", "key",
"value" | "hash", "type": "added" | "modified" | "deleted"[, "childTrieKey"]}``.

How, per trie (the main one, then each child trie in the order asked):

* the keys under each prefix are listed at both blocks
  (``state_getKeysPaged`` / ``childstate_getKeysPaged``, 100 a page, in key
  order) and walked side by side, so neither list is held whole;
* each run of up to 100 keys is read at both blocks in one
  ``state_queryStorageAt`` each (``childstate_getStorageEntries``): a key
  only in ``at`` is ``added`` (its value), only in ``previous`` ``deleted``
  (the value it had, as Substrate's own server answers), in both with
  another value ``modified``; equal values are no event;
* a key under a ``value`` item and a ``hash`` item gives two events, the
  value's first; a prefix inside another prefix of the same trie is listed
  once.

``previous`` missing is the parent of ``at`` (its header's ``parentHash``).
The spec wants ``previous`` to be an ancestor of ``at``; legacy calls cannot
tell forks apart, so only its height is checked (not above ``at``'s). Every
legacy call goes through the cache, routing and failover a client's own reads
take, so a diff of finalized blocks is mostly cache hits the second time.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from addon.chain.header_hash import is_other_genesis
from addon.newspec.storage_items import LegacyReads, child_key, value_hash
from addon.newspec.translate import BadParams, block_hash, header_number, hex_bytes, unknown_block
from addon.quota.costs import DESCENDANTS_KEYS
from addon.rpc.jsonrpc import INTERNAL_ERROR
from addon.rpc.new_spec import CallFailed, LegacyCaller

VALUE, HASH = "value", "hash"
RETURN_TYPES = (VALUE, HASH)
MAX_ITEMS = 64  # items of one call: each is a walk of two blocks' keys
# keys one call may walk (both blocks' together): ~4,000 legacy calls. A whole
# trie has millions of keys; a pallet's map, thousands (a block's changes are
# found only by walking every key under a prefix: legacy calls have no diff).
MAX_WALKED_KEYS = 200_000


@dataclass(frozen=True, slots=True)
class DiffItem:
    prefix: str  # 0x-hex, lower case ("0x": every key of the trie)
    return_type: str  # VALUE or HASH
    child: str | None = None  # childTrieKey as the client gave it (None: the main trie)


def parse_diff_items(raw: Any) -> list[DiffItem]:
    """The ``items`` param (``BadParams``, -32602, when malformed); None: the
    whole main trie, values (the spec)."""
    if raw is None:
        return [DiffItem("0x", VALUE)]
    if not isinstance(raw, list):
        raise BadParams("items must be a list")
    if len(raw) > MAX_ITEMS:
        raise BadParams(f"at most {MAX_ITEMS} items")
    out = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise BadParams(f"items[{i}] must be an object with returnType")
        kind = item.get("returnType")
        if kind not in RETURN_TYPES:
            raise BadParams(f"items[{i}].returnType must be one of {', '.join(RETURN_TYPES)}")
        key = item.get("key")
        prefix = "0x" if key is None else hex_bytes(key, f"items[{i}].key")
        child = item.get("childTrieKey")
        if child is not None:
            child_key(child)  # checked now: a bad key is -32602, not a storageDiffError
            child = str(child)
        out.append(DiffItem(prefix, kind, child))
    return out


def walked_prefixes(prefixes: Sequence[str]) -> list[str]:
    """The prefixes whose keys are listed: each once, none inside another
    (its keys are listed with the shorter one's), in key order."""
    out: list[str] = []
    for p in sorted(set(prefixes)):
        if not out or not p.startswith(out[-1]):
            out.append(p)
    return out


async def storage_diff(
    legacy: LegacyCaller,
    network: str,
    at: str,
    previous: str | None,
    items: Sequence[DiffItem],
    *,
    page_items: int = 64,
) -> AsyncIterator[list[dict[str, str]]]:
    """Pages of at most ``page_items`` ``storageDiff`` events (the module's
    docstring), one at least per run of keys walked (maybe empty: its consumer
    may stop between any two runs); ``CallFailed`` when a legacy call fails, a
    block is unknown or more than ``MAX_WALKED_KEYS`` keys would be walked."""
    at = block_hash(at)
    previous = await _previous(legacy, network, at, previous)
    page: list[dict[str, str]] = []
    walked = 0
    # one walk per trie, however the client spelled its key (the first spelling echoed)
    tries: dict[str | None, list[DiffItem]] = {}
    for item in items:
        tries.setdefault(child_key(item.child), []).append(item)
    for trie, group in tries.items():
        child = group[0].child
        new = LegacyReads(legacy, network, at, trie)
        old = LegacyReads(legacy, network, previous, trie)
        extra = {"childTrieKey": child} if child is not None else {}
        for prefix in walked_prefixes([item.prefix for item in group]):
            async for keys in _runs(new, old, prefix):
                walked += len(keys)
                if walked > MAX_WALKED_KEYS:
                    raise CallFailed(
                        INTERNAL_ERROR,
                        f"more than {MAX_WALKED_KEYS} keys under the items' prefixes: "
                        "ask for narrower ones",
                    )
                now = await _values(new, [k for k, in_new, _ in keys if in_new])
                then = await _values(old, [k for k, _, in_old in keys if in_old])
                for key, _, _ in keys:
                    page.extend(_events(key, now.get(key), then.get(key), group, extra))
                while len(page) >= page_items:
                    yield page[:page_items]
                    page = page[page_items:]
                yield []  # a run walked: the operation may stop here
    if page:
        yield page


async def _values(reads: LegacyReads, keys: list[str]) -> dict[str, str | None]:
    """The values of keys a node listed at this block: each must have one."""
    if not keys:
        return {}
    got = await reads.values(keys)
    if any(got.get(k) is None for k in keys):
        raise CallFailed(INTERNAL_ERROR, "a node listed a key it has no value for")
    return got


async def _previous(legacy: LegacyCaller, network: str, at: str, previous: str | None) -> str:
    """The block to diff against: ``previous`` (checked to be known and not
    above ``at``), or ``at``'s parent."""
    header = await _header(legacy, network, at)
    if previous is None:
        if header_number(header) == 0:
            raise CallFailed(INTERNAL_ERROR, "block 0 has no parent: give a previousHash")
        parent = header.get("parentHash")
        return block_hash(parent, "the header's parentHash")
    previous = block_hash(previous, "previousHash")
    before = await _header(legacy, network, previous)
    if header_number(before) > header_number(header):
        raise CallFailed(INTERNAL_ERROR, f"previousHash {previous} is above hash {at}")
    return previous


async def _header(legacy: LegacyCaller, network: str, block: str) -> dict[str, Any]:
    try:
        header = await legacy.call(network, "chain_getHeader", [block])
    except CallFailed as e:
        if not unknown_block(e):
            raise
        header = None
    # a block #0 that does not hash to the hash asked for is a node's genesis
    # given for a block it does not know (chopsticks): no such block either
    if not isinstance(header, dict) or is_other_genesis("chain_getHeader", block, header):
        raise CallFailed(INTERNAL_ERROR, f"UnknownBlock: no node knows {block}")
    return header


async def _runs(
    new: LegacyReads, old: LegacyReads, prefix: str
) -> AsyncIterator[list[tuple[str, bool, bool]]]:
    """The keys under ``prefix`` at either block, in key order, in runs of at
    most a page: ``(key, at the new block, at the old one)``."""
    a, b = _Side(new, prefix), _Side(old, prefix)
    run: list[tuple[str, bool, bool]] = []
    while True:
        ka, kb = await a.head(), await b.head()
        if ka is None and kb is None:
            break
        if kb is None or (ka is not None and ka < kb):  # hex order is byte order
            run.append((a.take(), True, False))
        elif ka is None or kb < ka:
            run.append((b.take(), False, True))
        else:
            a.take()
            run.append((b.take(), True, True))
        if len(run) >= DESCENDANTS_KEYS:
            yield run
            run = []
    if run:
        yield run


class _Side:
    """One block's keys under a prefix, a page at a time."""

    def __init__(self, reads: LegacyReads, prefix: str) -> None:
        self.reads, self.prefix = reads, prefix
        self.keys: list[str] = []
        self.at = 0  # the next key in ``keys``
        self.start: str | None = None  # the last key listed: the next page starts after it
        self.done = False

    async def head(self) -> str | None:
        while self.at >= len(self.keys) and not self.done:
            listed = await self.reads.keys(self.prefix, self.start)
            # a full page may go on; one that ends past the prefix (a node that
            # lists on beyond it) ends the walk too
            self.done = len(listed) < DESCENDANTS_KEYS or (
                bool(listed) and listed[-1] > self.prefix and not listed[-1].startswith(self.prefix)
            )
            if listed:
                # the walk side by side needs key order: a node that pages
                # otherwise would give a wrong diff (or never end)
                ordered = all(a < b for a, b in itertools.pairwise(listed))
                if not ordered or (self.start is not None and listed[0] <= self.start):
                    raise CallFailed(INTERNAL_ERROR, "state_getKeysPaged: keys out of order")
                self.start = listed[-1]
            # a node lists keys under the prefix; anything else is no descendant
            self.keys = [k for k in listed if k.startswith(self.prefix)]
            self.at = 0
        return self.keys[self.at] if self.at < len(self.keys) else None

    def take(self) -> str:
        key = self.keys[self.at]
        self.at += 1
        return key


def _events(
    key: str,
    now: str | None,
    then: str | None,
    group: Sequence[DiffItem],
    extra: dict[str, str],
) -> list[dict[str, str]]:
    if now == then:  # unchanged (None: not listed at that block)
        return []
    if then is None:
        kind, value = "added", now
    elif now is None:
        kind, value = "deleted", then  # the value it had
    else:
        kind, value = "modified", now
    assert value is not None
    wanted = {item.return_type for item in group if key.startswith(item.prefix)}
    out = []
    if VALUE in wanted:
        out.append({"event": "storageDiff", "key": key, "value": value, "type": kind, **extra})
    if HASH in wanted:
        out.append(
            {"event": "storageDiff", "key": key, "hash": value_hash(value), "type": kind, **extra}
        )
    return out
