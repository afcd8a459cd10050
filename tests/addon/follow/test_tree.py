"""The block tree a follow is told from (pure): parent-first adds, best,
finality that prunes the forks that lost, and the snapshot a new follow gets."""

from __future__ import annotations

import pytest

from addon.follow.tree import RECENT_FINALIZED, Block, BlockTree, UnknownParent

RT = {"type": "valid", "spec": {"specVersion": 1}}


def h(name: str) -> str:
    return "0x" + name.encode().hex().ljust(64, "0")


def tree() -> BlockTree:
    return BlockTree(Block(h("r"), h("p"), 10, RT))


def add(t: BlockTree, name: str, parent: str, number: int) -> Block:
    b = Block(h(name), h(parent), number)
    assert t.add(b)
    return b


def test_a_block_inherits_its_parents_runtime_and_needs_its_parent() -> None:
    t = tree()
    b = add(t, "a", "r", 11)
    assert b.runtime is RT
    with pytest.raises(UnknownParent):
        t.add(Block(h("x"), h("nope"), 12))
    with pytest.raises(UnknownParent):  # a parent, but not one number below
        t.add(Block(h("y"), h("a"), 13))
    assert not t.add(Block(h("a"), h("r"), 11))  # known already


def test_unfinalized_blocks_come_parent_first_with_every_fork() -> None:
    t = tree()
    add(t, "a", "r", 11)
    add(t, "b", "a", 12)
    add(t, "a2", "r", 11)
    add(t, "c", "b", 13)
    order = [b.hash for b in t.unfinalized()]
    assert sorted(order) == sorted([h("a"), h("b"), h("a2"), h("c")])
    for b in t.unfinalized():
        assert b.parent == t.finalized or order.index(b.parent) < order.index(b.hash)


def test_finality_returns_the_path_and_prunes_the_forks_that_lost() -> None:
    t = tree()
    add(t, "a", "r", 11)
    add(t, "b", "a", 12)
    add(t, "c", "b", 13)
    add(t, "a2", "r", 11)  # a fork off the root
    add(t, "b2", "a", 12)  # a fork off a
    add(t, "c2", "b2", 13)
    t.set_best(h("c"))
    hashes, pruned = t.finalize(h("b"))
    assert hashes == [h("a"), h("b")]
    assert sorted(pruned) == sorted([h("a2"), h("b2"), h("c2")])
    assert t.finalized == h("b")
    assert set(t.blocks) == {h("b"), h("c")}
    assert list(t.recent)[-3:] == [h("r"), h("a"), h("b")]
    assert t.best == h("c")
    assert t.finalize(h("b")) == ([], [])


def test_a_best_block_on_a_pruned_fork_moves_to_the_finalized_chain() -> None:
    t = tree()
    add(t, "a", "r", 11)
    add(t, "a2", "r", 11)
    add(t, "b2", "a2", 12)
    t.set_best(h("b2"))
    t.finalize(h("a"))
    assert t.best == h("a")


def test_recent_finalized_hashes_are_bounded() -> None:
    t = tree()
    parent = "r"
    for n in range(11, 30):
        add(t, f"n{n}", parent, n)
        parent = f"n{n}"
        t.finalize(h(parent))
    assert len(t.recent) == RECENT_FINALIZED
    assert list(t.recent)[-1] == t.finalized == h("n29")
    assert len(t.blocks) == 1


def test_recent_finalized_headers_follow_the_recent_hashes() -> None:
    t = BlockTree(Block(h("r"), h("p"), 10, RT, "0x10"))
    parent = h("r")
    for n in range(11, 11 + RECENT_FINALIZED + 2):
        t.add(Block(h(f"b{n}"), parent, n, header=f"0x{n}"))
        parent = h(f"b{n}")
        t.finalize(parent)
    assert set(t.recent_headers) == set(t.recent)  # no more kept than pinned by a new follow
    assert t.recent_headers[parent] == f"0x{10 + RECENT_FINALIZED + 2}"
