"""The shared storage reads (``storage_items``) over a fake legacy caller:
which legacy calls they make (every value and hash of a request in one
``state_queryStorageAt``, descendants page by page), what they yield, in
pages, paused between pages, for child tries, and their errors."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from addon.newspec.storage_items import (
    CHILD_PREFIX,
    StorageQuery,
    child_key,
    parse_items,
    storage_items,
    storage_pages,
)
from addon.newspec.translate import BadParams, unknown_block
from addon.quota.costs import DESCENDANTS_KEYS
from addon.rpc.new_spec import CallFailed
from tests.addon.newspec.fakes import FakeLegacy, hexed

PREFIX = "0xaabb"


def _store() -> dict[str, str]:
    out = {"0x01": "0x1111", "0x02": "0x2222", "0x0a": "0x" + "ab" * 40}
    out.update({f"{PREFIX}{i:04x}": f"0x{i:04x}" for i in range(250)})
    return out


async def _all(pages: Any) -> list[list[dict[str, str]]]:
    return [page async for page in pages]


def _hash(value: str) -> str:
    return "0x" + hashlib.blake2b(bytes.fromhex(value[2:]), digest_size=32).hexdigest()


async def test_values_and_hashes_take_one_query_for_the_whole_request() -> None:
    legacy = FakeLegacy(_store())
    at = legacy.hashes[5]
    queries = parse_items(
        [
            {"key": "0x01", "type": "value"},
            {"key": "0x02", "type": "hash"},
            {"key": "0x03", "type": "value"},  # absent: no item
            {"key": "0x01", "type": "hash"},
            {"key": "0x0A", "type": "value"},  # read lower-cased, echoed as spelled
        ]
    )
    pages = await _all(storage_items(legacy, "finney", at, queries))
    assert pages == [
        [
            {"key": "0x01", "value": "0x1111"},
            {"key": "0x02", "hash": _hash("0x2222")},
            {"key": "0x01", "hash": _hash("0x1111")},
            {"key": "0x0A", "value": "0x" + "ab" * 40},
        ]
    ]
    assert legacy.calls == [("state_queryStorageAt", [["0x01", "0x02", "0x03", "0x0a"], at])]


async def test_descendants_come_page_by_page_and_wait_for_the_next_ask() -> None:
    legacy = FakeLegacy(_store())
    at = legacy.hashes[5]
    pages = storage_items(
        legacy, "finney", at, [StorageQuery(PREFIX, "descendantsValues")], page_items=64
    )
    first = await anext(pages)
    assert len(first) == 64 and first[0] == {"key": f"{PREFIX}0000", "value": "0x0000"}
    # one page of keys and its values so far: nothing more until asked
    assert legacy.methods() == ["state_getKeysPaged", "state_queryStorageAt"]
    rest = await _all(pages)
    items = first + [x for page in rest for x in page]
    assert [x["key"] for x in items] == [f"{PREFIX}{i:04x}" for i in range(250)]
    assert [len(p) for p in rest] == [64, 64, 58]
    keys_calls = [p for m, p in legacy.calls if m == "state_getKeysPaged"]
    assert [p[1] for p in keys_calls] == [DESCENDANTS_KEYS] * 3
    assert [p[2] for p in keys_calls] == [None, f"{PREFIX}0063", f"{PREFIX}00c7"]


async def test_descendant_hashes_and_a_pagination_start() -> None:
    legacy = FakeLegacy(_store())
    at = legacy.hashes[5]
    query = StorageQuery(PREFIX, "descendantsHashes", start=f"{PREFIX}00f5")
    pages = await _all(storage_items(legacy, "finney", at, [query]))
    assert pages == [
        [{"key": f"{PREFIX}{i:04x}", "hash": _hash(f"0x{i:04x}")} for i in range(246, 250)]
    ]


async def test_a_pagination_start_outside_the_prefix_asks_no_node_past_it() -> None:
    """A start after every key under the prefix leaves nothing (a node would
    list from it anyway: chopsticks answered 23 keys); one before them all
    starts from the first."""
    legacy = FakeLegacy(_store())
    at = legacy.hashes[5]
    after = StorageQuery(PREFIX, "descendantsValues", start="0xff")
    assert await _all(storage_items(legacy, "finney", at, [after])) == []
    assert legacy.calls == []  # no node asked
    for before in ("0x01", "0xaa", "0xaaba99"):
        query = StorageQuery(PREFIX, "descendantsValues", start=before)
        items = [x for p in await _all(storage_items(legacy, "finney", at, [query])) for x in p]
        assert [x["key"] for x in items] == [f"{PREFIX}{i:04x}" for i in range(250)], before


async def test_the_closest_descendant_merkle_value_comes_from_a_read_proof() -> None:
    legacy = FakeLegacy(_store())
    at = legacy.hashes[5]
    queries = [StorageQuery(k, "closestDescendantMerkleValue") for k in (PREFIX, "0x01", "0xff")]
    pages = await _all(storage_items(legacy, "finney", at, queries))
    want = [
        {"key": k, "closestDescendantMerkleValue": hexed(m)}
        for k in (PREFIX, "0x01")
        if (m := legacy.trie.closest(bytes.fromhex(k[2:]))) is not None
    ]
    assert len(want) == 2 and pages == [want]
    assert legacy.methods() == ["chain_getHeader", "state_getReadProof"]
    assert legacy.calls[1][1] == [[PREFIX, "0x01", "0xff"], at]


async def test_a_child_trie_is_read_with_the_childstate_calls() -> None:
    legacy = FakeLegacy()
    prefixed = CHILD_PREFIX + "c0de"
    legacy.child[prefixed] = {"0x01": "0x99", "0x0102": "0x98", "0x0103": "0x97"}
    at = legacy.hashes[5]
    queries = [StorageQuery("0x01", "value"), StorageQuery("0x01", "descendantsHashes")]
    pages = await _all(storage_items(legacy, "finney", at, queries, child_trie="0xc0de"))
    assert pages[0][0] == {"key": "0x01", "value": "0x99"}
    assert [x["key"] for x in pages[0][1:]] == ["0x01", "0x0102", "0x0103"]
    assert legacy.methods() == [
        "childstate_getStorageEntries",
        "childstate_getKeysPaged",
        "childstate_getStorageEntries",
    ]
    assert all(p[0] == prefixed for _, p in legacy.calls)
    assert child_key(prefixed) == prefixed and child_key(None) is None


async def test_an_unknown_block_is_a_call_failed_that_says_so() -> None:
    legacy = FakeLegacy(_store())
    with pytest.raises(CallFailed) as e:
        await _all(
            storage_items(legacy, "finney", "0x" + "ee" * 32, [StorageQuery("0x01", "value")])
        )
    assert unknown_block(e.value)
    with pytest.raises(CallFailed) as e:
        queries = [StorageQuery("0x01", "closestDescendantMerkleValue")]
        await _all(storage_items(legacy, "finney", "0x" + "ee" * 32, queries))
    assert unknown_block(e.value)


async def test_a_node_error_passes_through_with_its_code() -> None:
    legacy = FakeLegacy(_store())
    legacy.fail["state_queryStorageAt"] = CallFailed(-32603, "no upstream", {"attempts": []})
    with pytest.raises(CallFailed) as e:
        await _all(
            storage_items(legacy, "finney", legacy.hashes[1], [StorageQuery("0x01", "value")])
        )
    assert (e.value.code, e.value.data) == (-32603, {"attempts": []})


def test_items_are_checked() -> None:
    assert parse_items([{"key": "0xAB", "type": "hash", "extra": 1}]) == [
        StorageQuery("0xab", "hash", asked="0xAB")
    ]
    assert parse_items(
        [{"key": "0x01", "type": "descendantsValues", "paginationStartKey": "0x0102"}],
        pagination=True,
    ) == [StorageQuery("0x01", "descendantsValues", "0x0102")]
    bad: list[Any] = [
        {"key": "0x01", "type": "everything"},
        {"key": "01", "type": "value"},
        {"key": "0x0", "type": "value"},
        {"type": "value"},
        "0x01",
    ]
    for item in bad:
        with pytest.raises(BadParams):
            parse_items([item])
    with pytest.raises(BadParams):
        parse_items(
            [{"key": "0x01", "type": "value", "paginationStartKey": "0x01"}], pagination=True
        )
    with pytest.raises(BadParams):
        parse_items({"key": "0x01"})
    with pytest.raises(BadParams):
        storage_pages(FakeLegacy(), "finney", "0x" + "00" * 32, [{"key": "0x01", "type": "x"}])
    with pytest.raises(BadParams):
        child_key("0xzz")
