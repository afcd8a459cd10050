"""The new spec's prices: each call priced like the legacy calls chainproxy
makes for it."""

from __future__ import annotations

from typing import Any

from addon.quota.costs import base_cost, runtime_api
from addon.rpc.jsonrpc import Call
from common.config.model import CostConfig

H = "0x" + "ab" * 32


def _items(values: int, descendants: int) -> list[dict[str, Any]]:
    return [{"key": f"0x{i:02x}", "type": "value"} for i in range(values)] + [
        {"key": "0xaa", "type": "descendantsHashes"} for _ in range(descendants)
    ]


def test_storage_reads_cost_their_query_and_a_page_per_descendants_item() -> None:
    costs = CostConfig()
    for method, lead in (("archive_v1_storage", [H]), ("chainHead_v1_storage", ["f", H])):
        assert base_cost(Call(1, method, [*lead, _items(25, 0)]), costs) == 3  # as 25 keys
        assert base_cost(Call(1, method, [*lead, _items(0, 2)]), costs) == 2 * (1 + 10)
        assert base_cost(Call(1, method, [*lead, _items(1, 1)]), costs) == 1 + 11
        assert base_cost(Call(1, method, [*lead, []]), costs) == 1
    named = {"hash": H, "items": _items(11, 0)}
    assert base_cost(Call(1, "archive_v1_storage", named), costs) == 2
    cheap = CostConfig(keys_per_unit=1000, storage_keys_per_unit=100)
    assert base_cost(Call(1, "archive_v1_storage", [H, _items(0, 1)]), cheap) == 2


def test_a_storage_diff_costs_two_headers_and_a_page_at_each_block_per_item() -> None:
    costs = CostConfig()
    page = 1 + 10  # 100 keys listed, then their values
    diff = "archive_v1_storageDiff"
    assert base_cost(Call(1, diff, [H]), costs) == 2 + 2 * page  # no items: the whole trie
    items = [{"key": "0x01", "returnType": "value"}, {"key": "0x02", "returnType": "hash"}]
    assert base_cost(Call(1, diff, [H, items]), costs) == 2 + 2 * 2 * page
    assert base_cost(Call(1, diff, {"hash": H, "items": items}), costs) == 2 + 2 * 2 * page
    assert base_cost(Call(1, "archive_v1_stopStorageDiff", ["x"]), costs) == 0


def test_runtime_calls_cost_like_state_call_with_their_function() -> None:
    archive = Call(1, "archive_v1_call", [H, "SubnetInfoRuntimeApi_get_all_metagraphs", "0x"])
    head = Call(1, "chainHead_v1_call", ["f", H, "SubnetInfoRuntimeApi_get_all_metagraphs", "0x"])
    assert runtime_api(archive) == runtime_api(head) == "SubnetInfoRuntimeApi_get_all_metagraphs"
    priced = CostConfig(runtime_apis={"SubnetInfoRuntimeApi_get_all_metagraphs": 20})
    assert base_cost(archive, priced) == base_cost(head, priced) == 20
    assert base_cost(archive, CostConfig()) == 1
    assert base_cost(archive, CostConfig(methods={"state_call": 3})) == 3
    assert base_cost(archive, CostConfig(methods={"archive_v1_call": 4, "state_call": 3})) == 4


def test_steering_calls_are_free_and_the_rest_cost_one() -> None:
    for method in (
        "chainHead_v1_unpin",
        "chainHead_v1_continue",
        "chainHead_v1_stopOperation",
        "chainHead_v1_unfollow",
        "archive_v1_stopStorage",
    ):
        assert base_cost(Call(1, method, ["x"]), CostConfig()) == 0
        assert base_cost(Call(1, method, ["x"]), CostConfig(enabled=False)) == 0
    for method in ("archive_v1_header", "chainHead_v1_follow", "chainSpec_v1_chainName"):
        assert base_cost(Call(1, method, [H]), CostConfig()) == 1
    assert (
        base_cost(Call(1, "archive_v1_storage", [H, _items(50, 3)]), CostConfig(enabled=False)) == 1
    )
