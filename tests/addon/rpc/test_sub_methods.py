"""The subscription kinds (pure): aliases to one canonical subscription, unsubscribe
methods, canonical params so equal subscriptions share, Substrate's notification
format."""

from __future__ import annotations

from typing import Any

import pytest

from addon.rpc.sub_methods import (
    SUBSCRIBE,
    UNSUBSCRIBE,
    BadParams,
    canonical_params,
    notification,
    share_key,
)


@pytest.mark.parametrize(
    ("alias", "canonical", "note"),
    [
        ("chain_subscribeNewHeads", "chain_subscribeNewHeads", "chain_newHead"),
        ("chain_subscribeNewHead", "chain_subscribeNewHeads", "chain_newHead"),
        ("subscribe_newHead", "chain_subscribeNewHeads", "chain_newHead"),
        ("chain_subscribeAllHeads", "chain_subscribeAllHeads", "chain_allHead"),
        ("chain_subscribeFinalizedHeads", "chain_subscribeFinalizedHeads", "chain_finalizedHead"),
        ("chain_subscribeFinalisedHeads", "chain_subscribeFinalizedHeads", "chain_finalizedHead"),
        ("state_subscribeRuntimeVersion", "state_subscribeRuntimeVersion", "state_runtimeVersion"),
        ("chain_subscribeRuntimeVersion", "state_subscribeRuntimeVersion", "state_runtimeVersion"),
        ("state_subscribeStorage", "state_subscribeStorage", "state_storage"),
    ],
)
def test_every_alias_maps_to_one_canonical_subscription(
    alias: str, canonical: str, note: str
) -> None:
    kind = SUBSCRIBE[alias]
    assert kind.subscribe == canonical and kind.notification == note


@pytest.mark.parametrize(
    "unsub",
    [
        "chain_unsubscribeNewHeads",
        "chain_unsubscribeNewHead",
        "unsubscribe_newHead",
        "chain_unsubscribeAllHeads",
        "chain_unsubscribeFinalizedHeads",
        "chain_unsubscribeFinalisedHeads",
        "state_unsubscribeRuntimeVersion",
        "chain_unsubscribeRuntimeVersion",
        "state_unsubscribeStorage",
    ],
)
def test_unsubscribe_methods_are_known(unsub: str) -> None:
    assert unsub in UNSUBSCRIBE


def test_write_subscriptions_are_not_read_subscriptions() -> None:
    assert "author_submitAndWatchExtrinsic" not in SUBSCRIBE


def test_storage_keys_are_canonical_so_equal_subscriptions_share() -> None:
    kind = SUBSCRIBE["state_subscribeStorage"]
    a = canonical_params(kind, [["0xAB", "0x01", "0xab"]])
    b = canonical_params(kind, {"keys": ["0x01", "0xab"]})
    assert a == b == [["0x01", "0xab"]]
    assert share_key("finney", kind, a) == share_key("finney", kind, b)
    assert share_key("finney", kind, a) != share_key("test", kind, a)


@pytest.mark.parametrize("params", [[], [[]], None, [["nothex"]], [[1]], [{"a": 1}]])
def test_bad_storage_params_are_refused(params: Any) -> None:
    with pytest.raises(BadParams):
        canonical_params(SUBSCRIBE["state_subscribeStorage"], params)


def test_head_subscriptions_take_no_params() -> None:
    kind = SUBSCRIBE["chain_subscribeNewHeads"]
    assert canonical_params(kind, []) == canonical_params(kind, None) == []
    with pytest.raises(BadParams):
        canonical_params(kind, [1])


def test_notification_is_substrates_wire_format() -> None:
    kind = SUBSCRIBE["chain_subscribeFinalisedHeads"]
    assert notification(kind, "s1", {"x": 1}) == {
        "jsonrpc": "2.0",
        "method": "chain_finalizedHead",
        "params": {"subscription": "s1", "result": {"x": 1}},
    }
