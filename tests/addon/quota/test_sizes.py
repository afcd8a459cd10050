"""How large kinds of calls answer (addon/quota/sizes.py)."""

from __future__ import annotations

from addon.quota.sizes import AnswerSizes, kind
from addon.rpc.jsonrpc import Call

FREE = 65_536
METAGRAPHS = Call(1, "state_call", ["SubnetInfoRuntimeApi_get_all_metagraphs", "0x"])
VERSION = Call(2, "state_call", ["Core_version", "0x"])


def test_a_kind_is_the_method_and_the_runtime_api() -> None:
    assert kind(METAGRAPHS) == "state_call:SubnetInfoRuntimeApi_get_all_metagraphs"
    assert kind(Call(1, "state_getKeysPaged", ["0x", 10])) == "state_getKeysPaged"


def test_only_kinds_that_answered_large_are_kept() -> None:
    sizes = AnswerSizes()
    sizes.learn(VERSION, 300, FREE)
    assert len(sizes) == 0 and sizes.expected(VERSION) == 0
    sizes.learn(METAGRAPHS, 1_048_580, FREE)
    assert sizes.expected(METAGRAPHS) == 1_048_580 and sizes.tracked(METAGRAPHS)


def test_the_estimate_follows_the_answers_and_forgets_a_kind_gone_small() -> None:
    sizes = AnswerSizes()
    sizes.learn(METAGRAPHS, 1_000_000, FREE)
    sizes.learn(METAGRAPHS, 2_000_000, FREE)
    assert 1_000_000 < sizes.expected(METAGRAPHS) < 2_000_000
    for _ in range(20):
        sizes.learn(METAGRAPHS, 100, FREE)
    assert not sizes.tracked(METAGRAPHS) and sizes.expected(METAGRAPHS) == 0


def test_the_table_is_bounded() -> None:
    sizes = AnswerSizes(max_kinds=3)
    for i in range(10):
        sizes.learn(Call(i, "state_call", [f"Api{i}_x", "0x"]), 100_000 + i, FREE)
    assert len(sizes) == 3
    assert sizes.expected(Call(0, "state_call", ["Api9_x", "0x"])) == 100_009


def test_a_restored_table_gives_way_to_what_was_learned_since() -> None:
    s = AnswerSizes(max_kinds=3)
    big = Call(1, "state_getKeys", ["0x"])
    s.learn(big, 500_000, FREE)
    assert s.changes == 1
    saved = {"old_a": 200_000.0, "state_getKeys": 100_000.0, "old_b": 300_000.0, "old_c": 1e6}
    s.restore(saved)
    assert s.expected(big) == 500_000  # learned here: kept
    # bounded: the oldest saved entry went first; what was learned here is newest
    assert list(s.snapshot()) == ["old_b", "old_c", "state_getKeys"]
    assert s.changes == 1  # restoring is not learning
    fresh = AnswerSizes()
    fresh.restore(s.snapshot())
    assert fresh.snapshot() == s.snapshot() and fresh.changes == 0
