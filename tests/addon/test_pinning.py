"""Block-height-aware routing (DESIGN.md section 4): a call that needs a height
goes to an upstream that has it, a state read pinned to a hash older than the
pruning window prefers an archive upstream, and the hash -> height index is
learned from answers passing through, in a bounded LRU."""

from __future__ import annotations

import random
from typing import Any

import pytest

from addon.chain.blocks import PRUNING_WINDOW, BlockIndex
from addon.pipeline.jsonrpc import Call
from addon.upstream.pool import TIER_LAGGING, TIER_SYNCED, TIER_UNHEALTHY, Upstream, UpstreamPool
from addon.upstream.routing_hints import hints


def h(n: int) -> str:
    """A block hash (0x + 64 hex) made from a number."""
    return "0x" + f"{n:064x}"


def call(method: str, *params: Any, id_: Any = 1) -> Call:
    return Call(id_, method, list(params))


def header(n: int) -> dict[str, Any]:
    return {
        "parentHash": h(n - 1),
        "number": hex(n),
        "stateRoot": h(10**9 + n),
        "extrinsicsRoot": h(2 * 10**9 + n),
        "digest": {"logs": []},
    }


STORAGE_KEY = "0x26aa394eea5630e07c48ae0c9558cef702a5c1b19ab7a04f536c519aca4983ac"

# --- hints: min_block -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ([100], 100),
        (["0x64"], 100),
        (["0X64"], 100),
        (["250"], 250),
        ([[5, "0x10", 12]], 16),
        ([[7]], 7),
    ],
)
def test_min_block_from_chain_get_block_hash_heights(params: list[Any], expected: int) -> None:
    got = hints([Call(1, "chain_getBlockHash", params)], tip=1000, index=BlockIndex())
    assert got.min_block == expected
    assert got.prefer_archive is False


def test_min_block_is_the_max_over_a_batch() -> None:
    calls = [
        call("chain_getBlockHash", 10),
        call("chain_getHeader"),
        call("chain_getBlockHash", [3, 40]),
        call("chain_getBlockHash", "0x1e"),
    ]
    assert hints(calls, tip=None, index=BlockIndex()).min_block == 40


@pytest.mark.parametrize(
    "params",
    [[], [None], ["latest"], [-1], [True], [[1, "x"]], {"n": 5}],
    ids=["best", "null", "word", "negative", "bool", "bad-in-list", "named"],
)
def test_no_min_block_without_a_readable_height(params: Any) -> None:
    c = Call(1, "chain_getBlockHash", params)
    assert hints([c], tip=1000, index=BlockIndex()).min_block is None


def test_other_methods_set_no_min_block() -> None:
    calls = [call("chain_getHeader", h(5)), call("system_health"), call("chain_getBlock")]
    assert hints(calls, tip=1000, index=BlockIndex()).min_block is None


# --- hints: prefer_archive ------------------------------------------------------------------


def index_with(*heights: int) -> BlockIndex:
    idx = BlockIndex()
    for n in heights:
        idx.put(h(n), n)
    return idx


def test_state_read_pinned_to_an_old_hash_prefers_archive() -> None:
    tip = 10_000
    old = tip - PRUNING_WINDOW - 1
    idx = index_with(old)
    got = hints([call("state_getStorage", STORAGE_KEY, h(old))], tip=tip, index=idx)
    assert got.prefer_archive is True
    assert got.min_block == old  # and only a node that has reached that block


@pytest.mark.parametrize("age", [0, 1, 10, PRUNING_WINDOW - 1, PRUNING_WINDOW])
def test_state_read_pinned_to_a_recent_hash_does_not(age: int) -> None:
    tip = 10_000
    idx = index_with(tip - age)
    got = hints([call("state_getStorage", STORAGE_KEY, h(tip - age))], tip=tip, index=idx)
    assert got.prefer_archive is False


def test_unknown_hash_does_not_prefer_archive() -> None:
    idx = index_with(1)
    got = hints([call("state_getStorage", STORAGE_KEY, h(2))], tip=10_000, index=idx)
    assert got.prefer_archive is False


def test_no_tip_does_not_prefer_archive() -> None:
    idx = index_with(1)
    got = hints([call("state_getStorage", STORAGE_KEY, h(1))], tip=None, index=idx)
    assert got.prefer_archive is False


@pytest.mark.parametrize(
    "c",
    [
        call("state_call", "Metadata_metadata", "0x", h(1)),
        call("state_getMetadata", h(1)),
        call("state_getRuntimeVersion", h(1)),
        call("state_getKeysPaged", STORAGE_KEY, 10, None, h(1)),
        call("childstate_getStorage", "0x3a6368696c64", STORAGE_KEY, h(1)),
        Call(1, "state_getStorage", {"key": STORAGE_KEY, "at": h(1)}),
    ],
    ids=["state_call", "metadata", "runtime-version", "keys-paged", "childstate", "named"],
)
def test_every_state_read_form_pinned_to_an_old_hash_prefers_archive(c: Call) -> None:
    assert hints([c], tip=10_000, index=index_with(1)).prefer_archive is True


def test_non_state_calls_pinned_to_an_old_hash_do_not_prefer_archive() -> None:
    # Pruned nodes keep blocks and headers; only state is discarded.
    calls = [call("chain_getBlock", h(1)), call("chain_getHeader", h(1))]
    assert hints(calls, tip=10_000, index=index_with(1)).prefer_archive is False


def test_one_old_state_read_in_a_batch_is_enough() -> None:
    tip = 10_000
    calls = [
        call("state_getStorage", STORAGE_KEY, h(tip)),
        call("chain_getBlockHash", 20),
        call("state_getStorage", STORAGE_KEY, h(1)),
    ]
    got = hints(calls, tip=tip, index=index_with(1, tip))
    assert got.prefer_archive is True and got.min_block == tip  # the highest block needed


def test_hash_lookup_ignores_case() -> None:
    idx = BlockIndex()
    idx.learn(call("chain_getBlockHash", 1), h(0xABC).upper().replace("0X", "0x"))
    got = hints([call("state_getStorage", STORAGE_KEY, h(0xABC))], tip=10_000, index=idx)
    assert got.prefer_archive is True


# --- BlockIndex.learn ---------------------------------------------------------------------


def test_learns_from_chain_get_block_hash_single() -> None:
    idx = BlockIndex()
    idx.learn(call("chain_getBlockHash", 77), h(77))
    idx.learn(call("chain_getBlockHash", "0x4e"), h(78))
    assert idx.get(h(77)) == 77 and idx.get(h(78)) == 78


def test_learns_from_chain_get_block_hash_list_skipping_nulls() -> None:
    idx = BlockIndex()
    idx.learn(call("chain_getBlockHash", [5, 6, 99999]), [h(5), h(6), None])
    assert idx.get(h(5)) == 5 and idx.get(h(6)) == 6
    assert len(idx) == 2


def test_does_not_learn_the_best_block_hash_without_a_height() -> None:
    idx = BlockIndex()
    idx.learn(call("chain_getBlockHash"), h(123))
    idx.learn(call("chain_getBlockHash", 5), None)  # a height the node does not have yet
    idx.learn(call("chain_getBlockHash", 6), "not a hash")
    assert len(idx) == 0


def test_learns_from_chain_get_header_by_hash() -> None:
    idx = BlockIndex()
    idx.learn(call("chain_getHeader", h(500)), header(500))
    assert idx.get(h(500)) == 500


def test_learns_from_chain_get_block_by_hash() -> None:
    idx = BlockIndex()
    answer = {"block": {"header": header(501), "extrinsics": ["0x00"]}, "justifications": None}
    idx.learn(call("chain_getBlock", h(501)), answer)
    assert idx.get(h(501)) == 501


def test_does_not_learn_from_unpinned_or_odd_header_answers() -> None:
    idx = BlockIndex()
    idx.learn(call("chain_getHeader"), header(9))  # the best header: no hash given
    idx.learn(call("chain_getHeader", h(9)), None)  # unknown block
    idx.learn(call("chain_getHeader", h(10)), {"number": "0xzz"})
    idx.learn(call("chain_getHeader", "0x1234"), header(11))  # not a block hash
    idx.learn(call("chain_getBlock", h(12)), {"block": {"extrinsics": []}})
    assert len(idx) == 0


@pytest.mark.parametrize("answer", [{"block": None}, {"block": "0x00"}])
def test_learn_never_raises_on_an_odd_block_answer(answer: Any) -> None:
    idx = BlockIndex()
    idx.learn(call("chain_getBlock", h(12)), answer)
    assert len(idx) == 0


def test_learned_heights_drive_the_archive_hint() -> None:
    # The usual client flow: ask the hash of an old height, then read state at it.
    idx = BlockIndex()
    idx.learn(call("chain_getBlockHash", 100), h(100))
    got = hints([call("state_getStorage", STORAGE_KEY, h(100))], tip=5000, index=idx)
    assert got.prefer_archive is True


def test_index_is_a_bounded_lru() -> None:
    idx = BlockIndex(max_entries=3)
    for n in (1, 2, 3):
        idx.put(h(n), n)
    assert idx.get(h(1)) == 1  # used: now the most recent
    idx.put(h(4), 4)
    assert len(idx) == 3
    assert idx.get(h(2)) is None  # the least recently used went first
    assert [idx.get(h(n)) for n in (1, 3, 4)] == [1, 3, 4]


def test_index_stays_bounded_under_many_learns() -> None:
    idx = BlockIndex(max_entries=100)
    for n in range(1000):
        idx.learn(call("chain_getBlockHash", n), h(n))
    assert len(idx) == 100
    assert idx.get(h(999)) == 999 and idx.get(h(0)) is None


# --- UpstreamPool.choose(min_block=) ------------------------------------------------------


def pool(*ups: tuple[str, int, int | None], seed: int = 1) -> UpstreamPool:
    """(id, tier, best) triples."""
    items = []
    for id_, tier, best in ups:
        u = Upstream(id=id_, url=f"https://{id_}.example.org", provider=id_, archive=False)
        u.tier, u.best = tier, best
        items.append(u)
    return UpstreamPool(
        items, eject_after=3, eject_cooldown_s=30.0, clock=lambda: 1000.0, rng=random.Random(seed)
    )


def picks(p: UpstreamPool, n: int = 60, **kw: Any) -> set[str]:
    out = set()
    for _ in range(n):
        u = p.choose(set(), **kw)
        assert u is not None
        out.add(u.id)
    return out


def test_upstreams_below_min_block_are_passed_over() -> None:
    p = pool(("low", TIER_SYNCED, 99), ("high", TIER_SYNCED, 100), ("higher", TIER_SYNCED, 105))
    assert picks(p, min_block=100) == {"high", "higher"}
    assert picks(p, min_block=None) == {"low", "high", "higher"}


def test_unknown_best_is_not_passed_over() -> None:
    p = pool(("low", TIER_SYNCED, 50), ("fresh", TIER_SYNCED, None))
    assert picks(p, min_block=100) == {"fresh"}


def test_a_lagging_upstream_that_has_the_block_beats_a_synced_one_that_does_not() -> None:
    p = pool(("synced", TIER_SYNCED, 99), ("lagging", TIER_LAGGING, 100))
    assert picks(p, min_block=100) == {"lagging"}


def test_below_min_block_is_still_chosen_when_nothing_else_is_left() -> None:
    p = pool(("a", TIER_SYNCED, 90), ("b", TIER_UNHEALTHY, 80))
    assert picks(p, min_block=100) == {"a"}  # the usual tier order among them
    p = pool(("a", TIER_SYNCED, 90), ("high", TIER_SYNCED, 200))
    assert p.choose({"high"}, min_block=100) is p.upstreams["a"]  # high already tried
    assert p.choose({"a", "high"}, min_block=100) is None


def test_min_block_from_hints_steers_the_choice() -> None:
    p = pool(("behind", TIER_SYNCED, 1_000), ("ahead", TIER_SYNCED, 1_002))
    need = hints([call("chain_getBlockHash", 1_001)], tip=1_002, index=BlockIndex()).min_block
    assert picks(p, min_block=need) == {"ahead"}


def test_when_nobody_has_the_block_yet_the_most_advanced_goes_first() -> None:
    p = pool(("a", TIER_SYNCED, 97), ("b", TIER_SYNCED, 99), ("c", TIER_SYNCED, 98))
    assert picks(p, min_block=100) == {"b"}
    tried = {"b"}
    nxt = p.choose(tried, min_block=100)
    assert nxt is not None and nxt.id == "c"


def test_a_call_pinned_to_a_known_recent_hash_needs_a_node_at_that_height() -> None:
    tip = 10_000
    got = hints([call("state_call", "Core_version", "0x", h(tip))], tip=tip, index=index_with(tip))
    assert got.min_block == tip and got.prefer_archive is False
    unknown = hints([call("state_call", "Core_version", "0x", h(5))], tip=tip, index=BlockIndex())
    assert unknown.min_block is None  # nothing known of that hash: any node
