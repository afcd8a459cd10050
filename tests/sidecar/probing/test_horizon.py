"""The horizon search (pure): simulated nodes of each kind answer the blocks
each round plans, and the fold must find their horizon, tell the models apart
and keep up with the chain."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.probing.horizon import (
    EDGE,
    STATE_CHECKS,
    Bracket,
    Horizon,
    horizon_from_json,
    observe,
    plan,
)
from tests.examples import examples


@dataclass
class Node:
    """What a node answers: whether it holds the state at block ``n`` at ``best``."""

    holds: Callable[[int, int], bool]
    archive: bool = False


def window(k: int) -> Node:
    """Keeps the state of its last ``k`` blocks (Substrate's ``--state-pruning k``)."""
    return Node(lambda n, best: best - n < k)


def fixed(x: int) -> Node:
    """Every block's state from block ``x`` on (synced from a snapshot)."""
    return Node(lambda n, best: n >= x)


def archive() -> Node:
    return Node(lambda n, best: True, archive=True)


def round_(h: Horizon, node: Node, best: int, reported: int | None = None) -> Horizon:
    """One full probe: the archive check (block 1) and the planned blocks."""
    blocks = plan(h, best, reported)
    assert len(blocks) <= STATE_CHECKS
    assert all(1 < n < best for n in blocks)
    checks = [(n, node.holds(n, best)) for n in blocks]
    return observe(h, best, checks, archive=node.holds(1, best))


def run(node: Node, rounds: int, *, best: int = 100_000, step: int = 5) -> tuple[Horizon, int]:
    h = Horizon()
    for _ in range(rounds):
        h = round_(h, node, best)
        best += step
    return h, best - step


def test_an_archive_is_found_in_one_round_and_needs_no_other_check() -> None:
    h = round_(Horizon(), archive(), 100_000)
    assert h.archive is True and h.model == "archive" and h.exact
    assert h.earliest(100_000) == 0 and h.latest_lost(100_000) is None
    assert plan(h, 100_005) == ()  # block 1 (the full probe's own check) is enough


@pytest.mark.parametrize("k", [64, 100, 256, 1000, 4096, 50_000])
def test_a_pruned_node_is_narrowed_to_the_block_and_the_model_found(k: int) -> None:
    h, best = run(window(k), 20)
    assert h.model == "window" and h.exact, h
    assert h.keeps == k
    assert h.earliest(best) == best - k + 1  # the last k blocks: best - k + 1 .. best
    assert h.latest_lost(best) == best - k
    # the horizon moves up with the node's best, without another probe
    assert h.earliest(best + 100) == best + 100 - k + 1


def test_the_first_round_checks_the_usual_depths_and_brackets_the_edge() -> None:
    best = 100_000
    assert plan(Horizon(), best) == (best - 64, best - 256)
    h = round_(Horizon(), window(256), best)
    assert (h.window.held, h.window.lost) == (64, 256)
    assert h.earliest(best) == best - 64  # known held; the rest is not known yet
    assert h.latest_lost(best) == best - 256
    assert h.model == "unknown" and h.keeps is None


def test_narrowing_takes_a_few_rounds_at_two_checks_each() -> None:
    h, best, rounds = Horizon(), 100_000, 0
    while not h.window.exact and rounds < 20:
        h = round_(h, window(256), best)
        best, rounds = best + 1, rounds + 1
    assert rounds <= 8, rounds


@pytest.mark.parametrize("x", [2, 500, 99_000])
def test_a_node_synced_from_a_snapshot_keeps_its_first_block(x: int) -> None:
    h, best = run(fixed(x), 20)
    assert h.model == "fixed" and h.exact, h
    assert h.keeps is None
    assert h.earliest(best) == x and h.earliest(best + 1000) == x
    assert h.latest_lost(best) == x - 1


def test_without_the_chain_advancing_the_model_stays_unknown_but_both_agree() -> None:
    h, _ = run(window(300), 12, step=0)
    assert h.model == "unknown"
    assert h.earliest(100_000) == 100_000 - 299 and h.latest_lost(100_000) == 100_000 - 300


def test_the_edge_is_verified_every_round_and_a_smaller_window_is_found_again() -> None:
    h, best = run(window(1000), 20)
    assert h.keeps == 1000
    assert plan(h, best + 5) == (best + 5 - 1000, best + 5 - 999)
    node = window(200)  # the node was restarted with less pruning history
    for _ in range(12):
        best += 5
        h = round_(h, node, best)
    assert h.exact and h.keeps == 200 and h.earliest(best) == best - 199


def test_a_larger_window_is_found_again() -> None:
    h, best = run(window(256), 16)
    node = window(5000)
    for _ in range(20):
        best += 5
        h = round_(h, node, best)
    assert h.exact and h.keeps == 5000


def test_a_reading_one_block_off_the_edge_is_looked_at_again() -> None:
    """The head moved between reading the best and the state (or finality
    lagged): not a new window. The contradicted end is looked for again next
    to where it was, and found in one round."""
    h, best = run(window(256), 16)
    assert h.keeps == 256
    late = observe(h, best + 5, [(best + 5 - 255, False)])  # one block older than thought
    assert not late.window.refuted and (late.window.held, late.window.lost) == (None, 255)
    assert late.latest_lost(best + 5) == best + 5 - 255
    h = late
    for _ in range(3):  # 254 held (255 wrongly lost), then 255 held again, and 256 lost
        best += 1
        h = round_(h, window(256), best)
    assert h.exact and h.keeps == 256
    best -= 5
    early = observe(h, best + 7, [(best + 7 - 256, True)])  # finality lagged a block more
    assert not early.window.refuted and early.window.held == 256
    assert early.earliest(best + 7) == best + 7 - 256
    h = early
    for b in range(best + 8, best + 11):  # 257 lost, then 256 lost, then 255 held
        h = round_(h, window(256), b)
    assert h.exact and h.keeps == 256


def test_a_contradiction_beyond_the_edge_refutes_the_window() -> None:
    b = Bracket(held=100, lost=101)
    assert b.see(100 - EDGE, False, EDGE).refuted
    assert not b.see(100 - EDGE + 1, False, EDGE).refuted


def test_a_node_that_lost_block_one_is_no_archive_any_more() -> None:
    h = round_(Horizon(), archive(), 100_000)
    h = round_(h, window(256), 100_010)
    assert h.archive is False and h.earliest(100_010) is None
    assert h.latest_lost(100_010) == 1
    h = round_(h, window(256), 100_011)
    assert h.earliest(100_011) == 100_011 - 64


def test_a_reported_block_is_checked_first_unless_known_lost() -> None:
    h, best = run(window(256), 16)
    assert plan(h, best, reported=best - 100)[0] == best - 100
    assert best - 300 not in plan(h, best, reported=best - 300)  # already known lost
    h = round_(h, window(50), best, reported=best - 100)  # the node keeps less now
    lost = h.latest_lost(best)
    assert lost is not None and lost >= best - 100


def test_an_inconclusive_round_folds_nothing() -> None:
    h = observe(Horizon(), 1000, [], archive=None)
    assert h == Horizon()
    assert observe(h, 1000, [(500, True)]).rounds == 1


def test_a_young_chain_plans_nothing_out_of_range() -> None:
    assert plan(Horizon(), 2) == ()
    assert all(1 < n < 50 for n in plan(Horizon(), 50))


def test_json_round_trip_and_damage() -> None:
    h, _ = run(window(256), 4)
    assert horizon_from_json(h.to_json()) == h
    bad: object
    for bad in (
        [],
        {"archive": "yes"},
        {"window": {"held": "3"}},
        {"fixed": {"refuted": 1}},
        {"rounds": -1},
    ):
        with pytest.raises(ValueError):
            horizon_from_json(bad)


@settings(max_examples=examples(200), deadline=None)
@given(
    kind=st.sampled_from(["window", "fixed"]),
    edge=st.integers(3, 200_000),
    step=st.integers(0, 20),
)
def test_property_every_node_is_found_exactly(kind: str, edge: int, step: int) -> None:
    """Whatever the node and however fast the chain goes (blocks per round),
    after enough rounds the horizon is found to the block, the model too once
    the chain moved, and what it claims is always true: held from ``earliest``
    on, lost at ``latest_lost``."""
    best = 300_000
    node = window(edge) if kind == "window" else fixed(min(edge, best - 10))
    h = Horizon()
    for _ in range(40):
        h = round_(h, node, best)
        earliest, lost = h.earliest(best), h.latest_lost(best)
        if earliest is not None:
            assert node.holds(earliest, best) and node.holds(best, best)
        if lost is not None:
            assert not node.holds(lost, best)
        best += step
    best -= step
    first = best - edge + 1 if kind == "window" else edge
    assert (h.earliest(best), h.latest_lost(best)) == (first, first - 1), h
    if step:
        assert h.exact and h.model == kind, h
