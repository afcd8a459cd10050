"""Subscription rules (pure): kinds and aliases, canonical params, and the
sequencers that keep a stream free of gaps and duplicates across node changes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from addon.subs.methods import (
    SUBSCRIBE,
    UNSUBSCRIBE,
    BadParams,
    canonical_params,
    notification,
    share_key,
)
from addon.subs.sequencer import MAX_FILL, HeadSequencer, StorageSequencer, ValueSequencer


def header(n: int, fork: str = "a") -> dict[str, Any]:
    return {
        "parentHash": f"0x{fork * 2}{n - 1:062x}",
        "number": hex(n),
        "stateRoot": "0x" + "11" * 32,
        "extrinsicsRoot": "0x" + "22" * 32,
        "digest": {"logs": []},
    }


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


def _deliver_all(seq: HeadSequencer, headers: list[dict[str, Any]]) -> list[int]:
    out = []
    for h in headers:
        step = seq.consider(h)
        if step.action == "fill":
            for n in step.fill:
                seq.delivered(header(n))
                out.append(n)
            step = seq.consider(h)
        if step.action == "deliver":
            seq.delivered(h)
            out.append(int(h["number"], 16))
    return out


def test_heads_in_order_are_delivered_once_each() -> None:
    seq = HeadSequencer()
    assert _deliver_all(seq, [header(n) for n in (10, 11, 12)]) == [10, 11, 12]
    assert seq.current() == header(12)


def test_a_new_node_repeating_heads_already_delivered_is_not_a_duplicate_for_clients() -> None:
    seq = HeadSequencer()
    _deliver_all(seq, [header(n) for n in (10, 11, 12)])
    # the node subscribed after a failover sends its current head (11 or 12) first
    assert seq.consider(header(12)).action == "drop"
    assert seq.consider(header(11)).action == "drop"


def test_a_gap_after_a_node_change_is_filled_in_order() -> None:
    seq = HeadSequencer()
    _deliver_all(seq, [header(10)])
    step = seq.consider(header(14))
    assert step.action == "fill" and step.fill == (11, 12, 13)
    assert _deliver_all(HeadSequencer(), [header(10), header(14)]) == [10, 11, 12, 13, 14]


def test_a_huge_gap_is_filled_only_up_to_the_bound() -> None:
    seq = HeadSequencer()
    seq.delivered(header(1))
    step = seq.consider(header(10_000))
    assert step.action == "fill" and len(step.fill) == MAX_FILL and step.fill[-1] == 9_999


def test_a_reorg_is_delivered_as_a_node_would() -> None:
    seq = HeadSequencer()
    _deliver_all(seq, [header(10), header(11), header(12)])
    other = header(12, fork="b")
    assert seq.consider(other).action == "deliver"
    seq.delivered(other)
    lower = header(11, fork="b")  # a reorg to a shorter chain
    assert seq.consider(lower).action == "deliver"
    seq.delivered(lower)
    assert seq.last == 11
    assert seq.consider(header(12, fork="b")).action == "deliver"  # the next one again


def test_all_heads_never_fill_gaps() -> None:
    seq = HeadSequencer(fill_gaps=False)
    seq.delivered(header(10))
    assert seq.consider(header(13)).action == "deliver"


def test_something_that_is_not_a_header_is_never_shown() -> None:
    assert HeadSequencer().consider({"number": "zz"}).action == "drop"
    assert HeadSequencer().consider("x").action == "drop"


def test_runtime_version_is_delivered_only_when_it_changes() -> None:
    seq = ValueSequencer()
    v1 = {"specVersion": 1}
    assert seq.consider(v1).action == "deliver"
    seq.delivered(v1)
    assert seq.consider({"specVersion": 1}).action == "drop"  # a new node's first value
    assert seq.consider({"specVersion": 2}).action == "deliver"


def test_storage_resubscription_delivers_only_a_changed_value() -> None:
    seq = StorageSequencer()
    first = {"block": "0x01", "changes": [["0xAA", "0x01"], ["0xbb", None]]}
    assert seq.consider(first).action == "deliver"
    seq.delivered(first)
    same = {"block": "0x09", "changes": [["0xaa", "0x01"], ["0xbb", None]]}
    assert seq.consider(same).action == "drop"
    changed = {"block": "0x0a", "changes": [["0xbb", "0x05"]]}
    assert seq.consider(changed).action == "deliver"
    seq.delivered(changed)
    assert seq.current() == {"block": "0x0a", "changes": [["0xaa", "0x01"], ["0xbb", "0x05"]]}


def test_a_subscriber_never_sees_a_notification_before_its_id() -> None:
    """Notifications that arrive while the answer naming the subscription is
    still on its way wait, and go out right after it, in order."""
    from addon.subs.fanout import SharedSubscription, Subscriber

    kind = SUBSCRIBE["chain_subscribeNewHeads"]
    sh = SharedSubscription("k", "finney", kind, [], clock=lambda: 0.0, call_timeout_s=1)
    sent: list[bytes] = []
    early = Subscriber("s1", sent.append, owner=None)
    sh.subscribers["s1"] = early
    sh._deliver(header(10))
    sh._deliver(header(11))
    assert sent == []  # its id is not sent yet
    sh.greet(early)
    assert [json.loads(b)["params"]["result"]["number"] for b in sent] == ["0xa", "0xb"]
    late = Subscriber("s2", sent.append, owner=None)
    sh.subscribers["s2"] = late
    sent.clear()
    sh.greet(late)  # nothing waited: the current head, as from a node
    assert [json.loads(b)["params"] for b in sent] == [{"subscription": "s2", "result": header(11)}]
