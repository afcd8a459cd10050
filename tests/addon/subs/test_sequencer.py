"""The sequencers that keep a subscription's stream free of gaps and duplicates across
node changes: heads in order and once, gaps filled up to a bound, reorgs as a node
shows them, values only when they change (pure)."""

from __future__ import annotations

from typing import Any

from addon.subs.sequencer import MAX_FILL, HeadSequencer, StorageSequencer, ValueSequencer
from tests.addon.helpers import (
    fork_header,
)


def _deliver_all(seq: HeadSequencer, headers: list[dict[str, Any]]) -> list[int]:
    out = []
    for h in headers:
        step = seq.consider(h)
        if step.action == "fill":
            for n in step.fill:
                seq.delivered(fork_header(n))
                out.append(n)
            step = seq.consider(h)
        if step.action == "deliver":
            seq.delivered(h)
            out.append(int(h["number"], 16))
    return out


def test_heads_in_order_are_delivered_once_each() -> None:
    seq = HeadSequencer()
    assert _deliver_all(seq, [fork_header(n) for n in (10, 11, 12)]) == [10, 11, 12]
    assert seq.current() == fork_header(12)


def test_a_new_node_repeating_heads_already_delivered_is_not_a_duplicate_for_clients() -> None:
    seq = HeadSequencer()
    _deliver_all(seq, [fork_header(n) for n in (10, 11, 12)])
    # the node subscribed after a failover sends its current head (11 or 12) first
    assert seq.consider(fork_header(12)).action == "drop"
    assert seq.consider(fork_header(11)).action == "drop"


def test_a_gap_after_a_node_change_is_filled_in_order() -> None:
    seq = HeadSequencer()
    _deliver_all(seq, [fork_header(10)])
    step = seq.consider(fork_header(14))
    assert step.action == "fill" and step.fill == (11, 12, 13)
    assert _deliver_all(HeadSequencer(), [fork_header(10), fork_header(14)]) == [10, 11, 12, 13, 14]


def test_a_huge_gap_is_filled_only_up_to_the_bound() -> None:
    seq = HeadSequencer()
    seq.delivered(fork_header(1))
    step = seq.consider(fork_header(10_000))
    assert step.action == "fill" and len(step.fill) == MAX_FILL and step.fill[-1] == 9_999


def test_a_reorg_is_delivered_as_a_node_would() -> None:
    seq = HeadSequencer()
    _deliver_all(seq, [fork_header(10), fork_header(11), fork_header(12)])
    other = fork_header(12, fork="b")
    assert seq.consider(other).action == "deliver"
    seq.delivered(other)
    lower = fork_header(11, fork="b")  # a reorg to a shorter chain
    assert seq.consider(lower).action == "deliver"
    seq.delivered(lower)
    assert seq.last == 11
    assert seq.consider(fork_header(12, fork="b")).action == "deliver"  # the next one again


def test_all_heads_never_fill_gaps() -> None:
    seq = HeadSequencer(fill_gaps=False)
    seq.delivered(fork_header(10))
    assert seq.consider(fork_header(13)).action == "deliver"


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
