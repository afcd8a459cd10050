"""What a call costs in quota units (addon/quota/costs.py)."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from addon.quota.costs import answer_bytes, base_cost, bytes_cost, runtime_api
from addon.rpc.jsonrpc import Call, dumps
from common.config.model import CostConfig

DEFAULT = CostConfig()
PREFIX = "0x658faa385070e074c85bf6b568cf0555"


def call(method: str, params: Any = None) -> Call:
    return Call(1, method, params if params is not None else [])


def test_a_plain_call_costs_one_and_unsubscribing_nothing() -> None:
    assert base_cost(call("chain_getHeader"), DEFAULT) == 1
    assert base_cost(call("state_getStorage", [PREFIX]), DEFAULT) == 1
    assert base_cost(call("chain_unsubscribeNewHeads", ["abc"]), DEFAULT) == 0


def test_key_pages_cost_by_the_keys_asked() -> None:
    assert base_cost(call("state_getKeysPaged", [PREFIX, 1000]), DEFAULT) == 10
    assert base_cost(call("state_getKeysPaged", [PREFIX, 1000, None, "0xab"]), DEFAULT) == 10
    assert base_cost(call("state_getKeysPaged", [PREFIX, 250]), DEFAULT) == 3
    assert base_cost(call("state_getKeysPaged", [PREFIX, 5]), DEFAULT) == 1
    assert base_cost(call("childstate_getKeysPaged", ["0x01", PREFIX, 1000]), DEFAULT) == 10
    # a count that is not a number: the node's error, charged as a plain call
    assert base_cost(call("state_getKeysPaged", [PREFIX, "many"]), DEFAULT) == 1
    assert base_cost(call("state_getKeysPaged", [PREFIX, True]), DEFAULT) == 1


def test_block_hashes_by_height_cost_by_the_heights_asked() -> None:
    assert base_cost(call("chain_getBlockHash", [5]), DEFAULT) == 1
    assert base_cost(call("chain_getBlockHash"), DEFAULT) == 1
    assert base_cost(call("chain_getBlockHash", [list(range(100))]), DEFAULT) == 1
    assert base_cost(call("chain_getBlockHash", [list(range(101))]), DEFAULT) == 2
    assert base_cost(call("chain_getHead", [list(range(50_000))]), DEFAULT) == 500


def test_storage_queries_cost_by_keys_and_by_the_blocks_a_range_spans() -> None:
    keys = [f"{PREFIX}{i:04x}" for i in range(100)]
    assert base_cost(call("state_queryStorageAt", [keys]), DEFAULT) == 10
    assert base_cost(call("state_queryStorageAt", [keys[:3]]), DEFAULT) == 1
    # a proof walks the trie for every key it proves
    assert base_cost(call("state_getReadProof", [keys]), DEFAULT) == 10
    assert base_cost(call("state_getChildReadProof", ["0x01", keys]), DEFAULT) == 10
    heights = {"0xaa": 100, "0xbb": 149}
    q = call("state_queryStorage", [keys[:10], "0xaa", "0xbb"])
    assert base_cost(q, DEFAULT, height=heights.get) == 50  # 10 keys x 50 blocks / 10
    open_ended = call("state_queryStorage", [keys[:10], "0xaa"])
    assert base_cost(open_ended, DEFAULT, height=heights.get, tip=199) == 100
    unknown = call("state_queryStorage", [keys[:10], "0xcc", "0xbb"])
    assert base_cost(unknown, DEFAULT, height=heights.get) == 1  # charged by its bytes


def test_operators_price_methods_and_runtime_apis() -> None:
    costs = CostConfig(
        methods={"state_getKeysPaged": 7, "system_health": 0},
        runtime_apis={"SubnetInfoRuntimeApi_get_all_metagraphs": 20},
    )
    assert base_cost(call("state_getKeysPaged", [PREFIX, 1000]), costs) == 7
    assert base_cost(call("system_health"), costs) == 0
    heavy = call("state_call", ["SubnetInfoRuntimeApi_get_all_metagraphs", "0x"])
    assert runtime_api(heavy) == "SubnetInfoRuntimeApi_get_all_metagraphs"
    assert base_cost(heavy, costs) == 20
    assert base_cost(call("state_call", ["Core_version", "0x"]), costs) == 1


def test_named_params_cost_what_the_same_list_costs() -> None:
    """A node takes params by name as well as in a list (Substrate's names):
    either form is priced alike, so a heavy read cannot pass for a plain one."""
    keys = [f"{PREFIX}{i:04x}" for i in range(30)]
    heights = {"0xaa": 100, "0xbb": 149}
    costs = CostConfig(runtime_apis={"SubnetInfoRuntimeApi_get_all_metagraphs": 20})
    for listed, named in (
        (["state_getKeysPaged", [PREFIX, 1000]], {"prefix": PREFIX, "count": 1000}),
        (["childstate_getKeysPaged", ["0x01", PREFIX, 500]], {"prefix": PREFIX, "count": 500}),
        (["state_queryStorageAt", [keys]], {"keys": keys}),
        (["childstate_getStorageEntries", ["0x01", keys]], {"keys": keys}),
        (
            ["state_queryStorage", [keys, "0xaa", "0xbb"]],
            {"keys": keys, "block": "0xaa", "hash": "0xbb"},
        ),
        (
            ["state_call", ["SubnetInfoRuntimeApi_get_all_metagraphs", "0x"]],
            {"name": "SubnetInfoRuntimeApi_get_all_metagraphs", "bytes": "0x"},
        ),
    ):
        method, params = listed
        want = base_cost(call(method, params), costs, height=heights.get)
        assert want > 1, method
        assert base_cost(call(method, named), costs, height=heights.get) == want, method
    named_call = call("state_call", {"name": "Core_version", "bytes": "0x"})
    assert runtime_api(named_call) == "Core_version"


def test_counting_calls_when_costs_are_off() -> None:
    off = CostConfig(enabled=False)
    assert base_cost(call("state_getKeysPaged", [PREFIX, 1000]), off) == 1
    assert bytes_cost(10 * 1_048_576, off) == 0


def test_bytes_cost_one_unit_per_started_64_kib_beyond_the_first() -> None:
    assert bytes_cost(0, DEFAULT) == 0
    assert bytes_cost(65_536, DEFAULT) == 0
    assert bytes_cost(65_537, DEFAULT) == 1
    assert bytes_cost(2 * 65_536, DEFAULT) == 1
    assert bytes_cost(1_048_576, DEFAULT) == 15  # 1 MiB: 16 units with its base cost


# chain answers are ASCII (hex, names, numbers): escapes would only inflate the JSON
ascii_text = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=40)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | ascii_text,
    lambda inner: st.lists(inner, max_size=8) | st.dictionaries(ascii_text, inner, max_size=8),
    max_leaves=60,
)


@given(json_values)
@example(-(10**34))  # found by `make explore`: a big integer was priced as 8 bytes
def test_answer_bytes_follows_the_json_size(value: Any) -> None:
    # close enough to price by: hex strings and lists of them, exactly; other
    # values within a few bytes per element
    size = len(dumps(value))
    assert answer_bytes(value) >= size // 4
    assert answer_bytes(value) <= 4 * size + 16


def test_answer_bytes_of_hex_blobs_is_exact_enough() -> None:
    blob = "0x" + "ab" * 500_000
    assert abs(answer_bytes(blob) - len(dumps(blob))) <= 2
    keys = [PREFIX + f"{i:064x}" for i in range(1000)]
    assert abs(answer_bytes(keys) - len(dumps(keys))) <= 2
