"""Which reads take an optional block hash and how one is pinned to the best head."""

from __future__ import annotations

from typing import Any

import pytest

from addon.chain.head_pinning import HASH_POSITION, pin
from addon.rpc.jsonrpc import Call

H = "0x" + "ab" * 32

OTHER = "0x" + "cd" * 32


@pytest.mark.parametrize(
    ("method", "params", "pinned"),
    [
        ("state_getStorage", ["0x01"], ["0x01", H]),
        ("state_getStorage", ["0x01", None], ["0x01", H]),
        (
            "state_call",
            ["NeuronInfoRuntimeApi_get_neurons_lite", "0x0100"],
            ["NeuronInfoRuntimeApi_get_neurons_lite", "0x0100", H],
        ),
        ("state_getKeysPaged", ["0x26aa", 100], ["0x26aa", 100, None, H]),
        ("state_getKeysPaged", ["0x26aa", 100, "0x26aa01"], ["0x26aa", 100, "0x26aa01", H]),
        ("state_queryStorageAt", [["0x01", "0x02"]], [["0x01", "0x02"], H]),
        ("state_getRuntimeVersion", [], [H]),
        ("state_getMetadata", [], [H]),
        ("childstate_getStorage", ["0xc", "0x01"], ["0xc", "0x01", H]),
    ],
)
def test_hash_optional_reads_without_a_hash_are_pinned(
    method: str, params: list[Any], pinned: list[Any]
) -> None:
    got = pin(Call(7, method, params), H)
    assert got is not None and got.params == pinned and got.id == 7
    assert got.facts.hash_at(HASH_POSITION[method]) == H  # now block-pinned


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("state_getStorage", ["0x01", OTHER]),  # already pinned
        ("state_getStorage", []),  # the key is missing: the node's error, unchanged
        ("state_getKeysPaged", ["0x26aa"]),  # count missing
        ("state_getStorage", {"key": "0x01"}),  # named params
        ("state_getStorage", ["0x01", None, "extra"]),  # more than it takes
        ("chain_getHeader", []),  # the head itself: how the head is learned
        ("chain_getBlock", []),
        ("chain_getBlockHash", []),
        ("system_health", []),
    ],
)
def test_what_is_never_pinned(method: str, params: Any) -> None:
    assert pin(Call(1, method, params), H) is None


def test_a_method_can_opt_out() -> None:
    assert pin(Call(1, "state_call", ["X", "0x"]), H, frozenset({"state_call"})) is None
    assert pin(Call(1, "state_getStorage", ["0x01"]), H, frozenset({"state_call"})) is not None
