"""Which block a call needs, for routing: the lowest height an upstream must have, and a
state read pinned to a hash older than the pruning window preferring an archive
upstream."""

from __future__ import annotations

from typing import Any

import pytest

from addon.chain.routing_hints import hints, needs_state, state_block
from addon.rpc.blocks import PRUNING_WINDOW, BlockIndex
from addon.rpc.jsonrpc import Call


def h(n: int) -> str:
    """A block hash (0x + 64 hex) made from a number."""
    return "0x" + f"{n:064x}"


def call(method: str, *params: Any, id_: Any = 1) -> Call:
    return Call(id_, method, list(params))


STORAGE_KEY = "0x26aa394eea5630e07c48ae0c9558cef702a5c1b19ab7a04f536c519aca4983ac"


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ([100], 100),
        (["0x64"], 100),
        (["0x6A"], 106),
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


def test_learned_heights_drive_the_archive_hint() -> None:
    # The usual client flow: ask the hash of an old height, then read state at it.
    idx = BlockIndex()
    idx.learn(call("chain_getBlockHash", 100), h(100))
    got = hints([call("state_getStorage", STORAGE_KEY, h(100))], tip=5000, index=idx)
    assert got.prefer_archive is True


def test_state_block_is_the_oldest_known_block_whose_state_is_read() -> None:
    idx = index_with(100, 200, 300)
    calls = [
        call("state_getStorage", STORAGE_KEY, h(300)),
        call("state_queryStorage", [STORAGE_KEY], h(100), h(200)),  # a range: from its start
        call("chain_getHeader", h(5)),  # a header read needs no state
    ]
    got = hints(calls, tip=10_000, index=idx)
    assert got.state_block == 100 and got.min_block == 300
    assert hints(calls[2:], tip=10_000, index=idx).state_block is None
    assert (
        hints([call("state_getStorage", STORAGE_KEY, h(999))], tip=10_000, index=idx).state_block
        is None
    )
    # runtime calls at a block read its state too; the chain_* reads of blocks do not
    assert needs_state("payment_queryInfo") and needs_state("subnetInfo_getSubnetsInfo")
    assert needs_state("chain_getRuntimeVersion") and not needs_state("chain_getBlock")
    assert state_block(Call(1, "state_call", ["X_y", "0x", h(200)]), idx) == 200
