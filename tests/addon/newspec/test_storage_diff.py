"""archive_v1_storageDiff through legacy calls: the events equal a diff
computed apart (set arithmetic over both blocks' storage), for any storage,
any items and keys that span several pages; the parent as the default
previous block; unknown blocks, malformed items and a node that pages
wrongly."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addon.newspec import storage_diff as storage_diff_module
from addon.newspec.storage_diff import DiffItem, parse_diff_items, storage_diff, walked_prefixes
from addon.newspec.storage_items import CHILD_PREFIX
from addon.quota.costs import DESCENDANTS_KEYS
from addon.rpc.new_spec import CallFailed

NET = "finney"
ZERO = "0x" + "00" * 32
GENESIS = {
    "parentHash": ZERO,
    "number": "0x0",
    "stateRoot": "0x" + "11" * 32,
    "extrinsicsRoot": "0x" + "22" * 32,
    "digest": {"logs": []},
}


def block(n: int) -> str:
    return "0x" + f"{n:064x}"


class DiffLegacy:
    """A ``LegacyCaller`` over blocks 0..3, each with its own main storage and
    child tries (by their unprefixed key); every call lands in ``calls``."""

    def __init__(self, states: dict[int, dict[str, str]]) -> None:
        self.states = states
        self.children: dict[int, dict[str, dict[str, str]]] = {}
        self.calls: list[tuple[str, list[Any]]] = []
        self.reverse_pages = False  # a node that pages wrongly
        self.past_prefix = False  # a node that lists on past the prefix asked
        self.forgets: set[str] = set()  # keys it lists but has no value for
        self.genesis_for_unknown = False  # chopsticks: its genesis for a hash it does not know

    async def call(self, network: str, method: str, params: list[Any]) -> Any:
        self.calls.append((method, params))
        return getattr(self, "_" + method)(*params)

    def _n(self, at: str) -> int:
        n = int(at, 16) if at.startswith("0x") and len(at) == 66 else -1
        if n not in self.states:
            raise CallFailed(4003, f"Client error: UnknownBlock: Header was not found: {at}")
        return n

    def _chain_getHeader(self, at: str) -> Any:
        try:
            n = self._n(at)
        except CallFailed:
            return GENESIS if self.genesis_for_unknown else None
        return {"number": hex(n), "parentHash": block(n - 1) if n else "0x" + "00" * 32}

    def _child(self, child: str, at: str) -> dict[str, str]:
        assert child.startswith(CHILD_PREFIX)
        return self.children.get(self._n(at), {}).get("0x" + child[len(CHILD_PREFIX) :], {})

    def _page(self, keys: dict[str, str], prefix: str, count: int, start: str | None) -> list[str]:
        under = (lambda k: k >= prefix) if self.past_prefix else (lambda k: k.startswith(prefix))
        found = sorted(k for k in keys if under(k) and (start is None or k > start))
        page = found[:count]
        return page[::-1] if self.reverse_pages else page

    def _state_getKeysPaged(self, prefix: str, count: int, start: str | None, at: str) -> Any:
        return self._page(self.states[self._n(at)], prefix, count, start)

    def _childstate_getKeysPaged(
        self, child: str, prefix: str, count: int, start: str | None, at: str
    ) -> Any:
        return self._page(self._child(child, at), prefix, count, start)

    def _state_queryStorageAt(self, keys: list[str], at: str) -> Any:
        state = self.states[self._n(at)]
        changes = [[k, None if k in self.forgets else state.get(k)] for k in keys]
        return [{"block": at, "changes": changes}]

    def _childstate_getStorageEntries(self, child: str, keys: list[str], at: str) -> Any:
        state = self._child(child, at)
        return [state.get(k) for k in keys]


async def diff(
    legacy: DiffLegacy, at: int, previous: int | None, items: list[DiffItem], page: int = 7
) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    before = None if previous is None else block(previous)
    async for got in storage_diff(legacy, NET, block(at), before, items, page_items=page):
        assert len(got) <= page  # (an empty page: a run walked, a point to stop at)
        out.extend(got)
    return out


def value_hash(value: str) -> str:
    return "0x" + hashlib.blake2b(bytes.fromhex(value[2:]), digest_size=32).hexdigest()


def expected(
    new: dict[str, str], old: dict[str, str], items: list[DiffItem]
) -> list[dict[str, str]]:
    """The diff, apart: every key under an item's prefix whose value differs,
    in key order, the value event before the hash event."""
    out = []
    for key in sorted(set(new) | set(old)):
        if new.get(key) == old.get(key):
            continue
        kinds = {i.return_type for i in items if key.startswith(i.prefix)}
        kind = "added" if key not in old else "deleted" if key not in new else "modified"
        value = new[key] if key in new else old[key]
        if "value" in kinds:
            out.append({"event": "storageDiff", "key": key, "value": value, "type": kind})
        if "hash" in kinds:
            h = value_hash(value)
            out.append({"event": "storageDiff", "key": key, "hash": h, "type": kind})
    return out


keys = st.binary(min_size=1, max_size=2).map(lambda b: "0x" + b.hex())
values = st.binary(min_size=0, max_size=3).map(lambda b: "0x" + b.hex())
storages = st.dictionaries(keys, values, max_size=260)
prefixes = st.sampled_from(["0x", "0x0", "0x00", "0x01", "0x0f", "0xa", "0xab", "0x0001"])
item_lists = st.lists(
    st.builds(lambda p, t: DiffItem(p, t), prefixes, st.sampled_from(["value", "hash"])),
    min_size=1,
    max_size=4,
)


@settings(max_examples=150, deadline=None)
@given(
    old=storages,
    changed=storages,
    dropped=st.sets(keys, max_size=40),
    items=item_lists,
    child=st.booleans(),
    page=st.sampled_from([1, 7, 64]),
)
async def test_events_equal_a_diff_computed_apart(
    old: dict[str, str],
    changed: dict[str, str],
    dropped: set[str],
    items: list[DiffItem],
    child: bool,
    page: int,
) -> None:
    # the new block: some of the old keys kept, some changed or added, some dropped
    new = {k: v for k, v in {**old, **changed}.items() if k not in dropped}
    if child:  # the same, in a child trie (the main trie holds something else)
        legacy = DiffLegacy({1: {"0x01": "0x01"}, 2: {"0x01": "0x02"}})
        legacy.children = {1: {"0xc1": old}, 2: {"0xc1": new}}
        items = [DiffItem(i.prefix, i.return_type, "0xc1") for i in items]
        want = [{**e, "childTrieKey": "0xc1"} for e in expected(new, old, items)]
    else:
        legacy = DiffLegacy({1: old, 2: new})
        want = expected(new, old, items)
    assert await diff(legacy, 2, 1, items, page) == want


async def test_keys_over_several_pages_are_walked_side_by_side() -> None:
    n = DESCENDANTS_KEYS * 3 + 17
    old = {f"0x{i:04x}": "0x01" for i in range(0, n, 2)}  # even keys
    new = {f"0x{i:04x}": "0x01" for i in range(0, n, 3)}  # every third
    legacy = DiffLegacy({1: old, 2: new})
    got = await diff(legacy, 2, 1, [DiffItem("0x", "value")], page=64)
    assert got == expected(new, old, [DiffItem("0x", "value")])
    assert {e["type"] for e in got} == {"added", "deleted"}
    # pages of 100 keys, each run's values in one call per block
    listed = [p for m, p in legacy.calls if m == "state_getKeysPaged"]
    assert all(p[1] == DESCENDANTS_KEYS for p in listed)
    reads = [p for m, p in legacy.calls if m == "state_queryStorageAt"]
    assert all(0 < len(p[0]) <= DESCENDANTS_KEYS for p in reads)


async def test_the_parent_is_the_default_previous_block() -> None:
    legacy = DiffLegacy({0: {}, 1: {"0x01": "0xaa"}, 2: {"0x01": "0xbb", "0x02": "0xcc"}, 3: {}})
    got = await diff(legacy, 2, None, parse_diff_items(None))
    assert got == [
        {"event": "storageDiff", "key": "0x01", "value": "0xbb", "type": "modified"},
        {"event": "storageDiff", "key": "0x02", "value": "0xcc", "type": "added"},
    ]
    # a deleted key carries the value it had, as Substrate's server says
    got = await diff(legacy, 3, None, [DiffItem("0x", "hash")])
    assert [(e["key"], e["type"], e["hash"]) for e in got] == [
        ("0x01", "deleted", value_hash("0xbb")),
        ("0x02", "deleted", value_hash("0xcc")),
    ]


async def test_a_key_under_a_value_and_a_hash_item_gives_both_value_first() -> None:
    legacy = DiffLegacy({1: {"0xab01": "0x01"}, 2: {"0xab01": "0x02"}})
    got = await diff(legacy, 2, 1, [DiffItem("0xab", "hash"), DiffItem("0xab01", "value")])
    assert [set(e) - {"event", "key", "type"} for e in got] == [{"value"}, {"hash"}]
    # the inner prefix was not listed a second time
    assert [p[0] for m, p in legacy.calls if m == "state_getKeysPaged"] == ["0xab", "0xab"]


async def test_child_tries_are_diffed_apart_and_say_which() -> None:
    legacy = DiffLegacy({1: {"0x01": "0x01"}, 2: {"0x01": "0x01"}})
    legacy.children = {1: {"0xc1": {"0x05": "0x01"}}, 2: {"0xc1": {"0x05": "0x02"}}}
    items = parse_diff_items(
        [{"returnType": "value"}, {"returnType": "value", "childTrieKey": "0xc1"}]
    )
    got = await diff(legacy, 2, 1, items)
    assert got == [
        {
            "event": "storageDiff",
            "key": "0x05",
            "value": "0x02",
            "type": "modified",
            "childTrieKey": "0xc1",
        }
    ]


async def test_unknown_blocks_a_previous_block_above_and_no_parent_are_errors() -> None:
    legacy = DiffLegacy({0: {}, 1: {}, 2: {}})
    for at, previous, says in (
        (9, 1, f"UnknownBlock: no node knows {block(9)}"),
        (2, 9, f"UnknownBlock: no node knows {block(9)}"),
        (1, 2, f"previousHash {block(2)} is above hash {block(1)}"),
        (0, None, "block 0 has no parent: give a previousHash"),
    ):
        with pytest.raises(CallFailed) as e:
            await diff(legacy, at, previous, parse_diff_items(None))
        assert e.value.message == says
    assert await diff(legacy, 0, 0, parse_diff_items(None)) == []  # a block against itself


async def test_a_key_listed_without_a_value_is_an_error_not_an_event() -> None:
    legacy = DiffLegacy({1: {"0x01": "0x01"}, 2: {"0x01": "0x01"}})
    legacy.forgets = {"0x01"}
    with pytest.raises(CallFailed, match="no value"):
        await diff(legacy, 2, 1, parse_diff_items(None))


async def test_a_node_listing_past_the_prefix_is_not_paged_to_the_end() -> None:
    state = {f"0x{i:04x}": "0x01" for i in range(DESCENDANTS_KEYS * 5)}
    legacy = DiffLegacy({1: state, 2: {**state, "0x0001": "0x02"}})
    legacy.past_prefix = True
    got = await diff(legacy, 2, 1, [DiffItem("0x0000", "value"), DiffItem("0x0001", "value")])
    assert got == [{"event": "storageDiff", "key": "0x0001", "value": "0x02", "type": "modified"}]
    listed = [p for m, p in legacy.calls if m == "state_getKeysPaged"]
    assert len(listed) == 4  # one page per prefix and block, not the rest of the trie


async def test_one_child_trie_spelled_two_ways_is_walked_once() -> None:
    legacy = DiffLegacy({1: {}, 2: {}})
    legacy.children = {1: {"0xc1": {"0x05": "0x01"}}, 2: {"0xc1": {"0x05": "0x02"}}}
    items = parse_diff_items(
        [
            {"returnType": "value", "childTrieKey": "0xC1"},
            {"returnType": "hash", "childTrieKey": CHILD_PREFIX + "c1"},
        ]
    )
    got = await diff(legacy, 2, 1, items)
    assert [(e["type"], e["childTrieKey"], "value" in e) for e in got] == [
        ("modified", "0xC1", True),
        ("modified", "0xC1", False),
    ]
    assert len([m for m, _ in legacy.calls if m == "childstate_getKeysPaged"]) == 2


async def test_a_walk_past_the_bound_ends_in_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(storage_diff_module, "MAX_WALKED_KEYS", 250)
    state = {f"0x{i:04x}": "0x01" for i in range(200)}
    legacy = DiffLegacy({1: state, 2: state})
    assert await diff(legacy, 2, 1, parse_diff_items(None)) == []  # 200 keys: within
    legacy = DiffLegacy({1: state, 2: {f"0x{i:04x}": "0x01" for i in range(200, 400)}})
    with pytest.raises(CallFailed, match="more than 250 keys"):
        await diff(legacy, 2, 1, parse_diff_items(None))


async def test_a_genesis_given_for_an_unknown_block_is_no_such_block() -> None:
    legacy = DiffLegacy({1: {}, 2: {}})
    legacy.genesis_for_unknown = True
    with pytest.raises(CallFailed, match="UnknownBlock"):
        await diff(legacy, 9, None, parse_diff_items(None))
    assert [m for m, _ in legacy.calls] == ["chain_getHeader"]


async def test_a_node_that_pages_backwards_ends_in_an_error_not_a_loop() -> None:
    n = DESCENDANTS_KEYS * 2
    legacy = DiffLegacy({1: {f"0x{i:04x}": "0x01" for i in range(n)}, 2: {}})
    legacy.reverse_pages = True
    with pytest.raises(CallFailed, match="out of order"):
        await diff(legacy, 2, 1, parse_diff_items(None))


def test_malformed_items_are_32602() -> None:
    for raw in (
        "x",
        [1],
        [{"key": "0x01"}],
        [{"key": "0x01", "returnType": "descendantsValues"}],
        [{"key": "zz", "returnType": "value"}],
        [{"returnType": "value", "childTrieKey": 5}],
        [{"returnType": "value"}] * 65,
    ):
        with pytest.raises(CallFailed) as e:
            parse_diff_items(raw)
        assert e.value.code == -32602, raw
    assert parse_diff_items([{"key": "0xAB", "returnType": "hash"}]) == [DiffItem("0xab", "hash")]


def test_prefixes_inside_others_are_walked_once() -> None:
    assert walked_prefixes(["0xab", "0xa", "0xab01", "0xb"]) == ["0xa", "0xb"]
    assert walked_prefixes(["0x"]) == ["0x"]
    assert walked_prefixes(["0x0f", "0x01", "0x01"]) == ["0x01", "0x0f"]
