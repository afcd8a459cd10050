"""The best head each network has shown: the highest header with its real hash, used
only while fresh and not behind the probes; a newer hash shown without its header
pauses pinning until the header comes."""

from __future__ import annotations

from typing import Any

from addon.chain.head_book import HeadBook
from addon.chain.header_hash import header_hash

H = "0x" + "ab" * 32

OTHER = "0x" + "cd" * 32


def header(n: int, parent: str = "0x" + "11" * 32) -> dict[str, Any]:
    return {
        "parentHash": parent,
        "number": hex(n),
        "stateRoot": "0x" + "22" * 32,
        "extrinsicsRoot": "0x" + "33" * 32,
        "digest": {"logs": []},
    }


def test_the_highest_header_seen_is_the_head_with_its_real_hash() -> None:
    book = HeadBook()
    assert book.learn("finney", header(10), now=0.0)
    assert book.get("finney").hash == header_hash(header(10))  # type: ignore[union-attr]
    assert not book.learn("finney", header(9), now=1.0)  # older: ignored
    assert book.learn("finney", header(11), now=2.0, block_hash=H)  # the hash asked for
    assert book.get("finney") is not None and book.get("finney").number == 11  # type: ignore[union-attr]
    assert book.get("test") is None  # per network
    assert not book.learn("finney", {"number": "0xzz"}, now=3.0)
    assert not book.learn("finney", None, now=3.0)


def test_a_head_is_used_only_while_fresh_and_not_behind_the_probes() -> None:
    book = HeadBook()
    book.learn("finney", header(100), now=10.0)
    assert book.fresh("finney", 20.0, max_age_s=30, probe_tip=100) is not None
    assert book.fresh("finney", 20.0, max_age_s=30, probe_tip=None) is not None
    assert book.fresh("finney", 41.0, max_age_s=30, probe_tip=100) is None  # too old
    assert book.fresh("finney", 20.0, max_age_s=30, probe_tip=101) is None  # probes saw more
    book.learn("finney", header(100), now=40.0)  # the same head, seen again: fresh again
    assert book.fresh("finney", 65.0, max_age_s=30, probe_tip=100) is not None


def test_a_head_the_chain_moved_back_from_is_forgotten() -> None:
    """The best block moved back to a shorter fork (the probes' tip below a
    head no header replaced for seconds): the head is dropped, so reads go unpinned, and
    the next header is the head though it is lower (highest-wins kept the
    abandoned head, and its cached state, until it aged out)."""
    book = HeadBook()
    book.learn("finney", header(7), now=0.0)
    # just learned: the probes lag a new head (a fast chain, several blocks)
    assert book.fresh("finney", 1.0, max_age_s=30, probe_tip=3) is not None
    assert book.fresh("finney", 7.0, max_age_s=30, probe_tip=7) is not None  # caught up
    assert book.fresh("finney", 7.0, max_age_s=30, probe_tip=5) is None  # moved back
    assert book.get("finney") is None
    assert book.learn("finney", header(6, parent=OTHER), now=8.0)  # lower: the head now
    head = book.fresh("finney", 8.0, max_age_s=30, probe_tip=6)
    assert head is not None and head.number == 6


def test_a_reorg_at_the_same_height_replaces_the_head() -> None:
    book = HeadBook()
    book.learn("finney", header(5, parent=H), now=0.0)
    assert book.learn("finney", header(5, parent=OTHER), now=1.0)
    assert book.get("finney").hash == header_hash(header(5, parent=OTHER))  # type: ignore[union-attr]


def test_a_new_hash_shown_without_its_header_pauses_pinning_until_the_header() -> None:
    book = HeadBook()
    book.learn("finney", header(100), now=0.0)
    book.shown("finney", H.upper().replace("0X", "0x"), now=1.0, height=None)  # chain_getHead
    assert book.unseen("finney")
    assert book.fresh("finney", 2.0, max_age_s=30, probe_tip=100) is None
    assert not book.learn("finney", header(99), now=3.0)  # another block's header: still waiting
    assert book.fresh("finney", 3.0, max_age_s=30, probe_tip=100) is None
    assert book.learn("finney", header(101), now=4.0, block_hash=H)  # its header
    head = book.fresh("finney", 5.0, max_age_s=30, probe_tip=100)
    assert head is not None and head.hash == H and not book.unseen("finney")


def test_a_shown_hash_that_is_the_head_or_older_changes_nothing() -> None:
    book = HeadBook()
    book.learn("finney", header(100), now=0.0, block_hash=H)
    book.shown("finney", H, now=1.0, height=None)  # the head itself
    book.shown("finney", OTHER, now=1.0, height=99)  # chain_getBlockHash(99): older
    assert book.fresh("finney", 2.0, max_age_s=30, probe_tip=None) is not None
    book.shown("finney", OTHER, now=3.0, height=101)  # chain_getBlockHash(101): newer
    assert book.fresh("finney", 4.0, max_age_s=30, probe_tip=None) is None
    book.learn("finney", header(101), now=5.0)  # a header at that height: the head is there
    assert book.fresh("finney", 6.0, max_age_s=30, probe_tip=None) is not None


def test_a_shown_hash_that_was_older_or_never_explained_stops_pausing() -> None:
    book = HeadBook()
    book.learn("finney", header(100), now=0.0)
    book.shown("finney", OTHER, now=1.0, height=None)  # a lagging node's head, say
    book.learn("finney", header(98), now=2.0, block_hash=OTHER)  # it was #98
    assert book.fresh("finney", 2.0, max_age_s=30, probe_tip=100) is not None
    book.shown("finney", H, now=3.0, height=None)  # a header that never comes
    book.learn("finney", header(100), now=20.0)  # the head stays fresh meanwhile
    assert book.fresh("finney", 33.0, max_age_s=30, probe_tip=100) is None  # within max_age_s
    assert book.fresh("finney", 34.0, max_age_s=30, probe_tip=100) is not None  # then the tip
    assert not book.unseen("finney")


def test_a_distrusted_head_is_not_pinned_to_until_another_comes() -> None:
    book = HeadBook()
    book.learn("finney", header(10), now=0.0, block_hash=H)
    book.distrust("finney", H.upper().replace("0X", "0x"))
    assert book.fresh("finney", 1.0, max_age_s=30, probe_tip=None) is None
    book.learn("finney", header(10), now=1.5, block_hash=H)  # shown again: still not
    assert book.fresh("finney", 2.0, max_age_s=30, probe_tip=None) is None
    book.learn("finney", header(11), now=3.0, block_hash=OTHER)  # a new head: pinned again
    head = book.fresh("finney", 4.0, max_age_s=30, probe_tip=None)
    assert head is not None and head.hash == OTHER


def test_a_tip_the_sidecar_stopped_refreshing_is_not_believed() -> None:
    """With the sidecar down its last tip stays: it would soon be two blocks
    below every head learned from subscriptions and drop each as abandoned.
    Past ``max_age_s`` it says nothing (pinning goes on from the heads)."""
    from addon.chain.state import ChainState

    chain = ChainState()
    chain.set_heights("finney", 5, 3, at=100.0)
    assert chain.current_tip("finney", 110.0, 30) == 5
    assert chain.current_tip("finney", 131.0, 30) is None
    chain.set_heights("test", 9, 8)  # no time given (tests, tools): believed
    assert chain.current_tip("test", 1e9, 30) == 9


def test_pinning_resumes_at_the_first_block_built_on_the_block_moved_back_to() -> None:
    """The head forgotten as abandoned (the chain moved back), the hash of the
    block moved back to, shown without its header (``chain_getBlockHash()``,
    no height known), paused pinning until 30 s after its last show: a child
    of it ends the pause (pinning to it is never older than what was shown)."""
    book = HeadBook()
    target = header(12, parent=OTHER)  # the block the chain moves back to
    target_hash = header_hash(target)
    book.learn("finney", target, now=0.0)
    book.learn("finney", header(15), now=1.0)  # the fork the chain then leaves
    assert book.fresh("finney", 8.0, max_age_s=30, probe_tip=12) is None  # abandoned
    assert book.get("finney") is None
    # a client polls chain_getBlockHash() while no block is built (20 s): each
    # poll shows the target's hash, its height unknown to the block index
    for t in range(8, 29):
        book.shown("finney", target_hash, now=float(t), height=None)
        assert book.fresh("finney", float(t), max_age_s=30, probe_tip=12) is None
    # the next block is built on it; its header comes on the new-heads subscription
    assert book.learn("finney", header(13, parent=target_hash), now=30.0)
    head = book.fresh("finney", 31.0, max_age_s=30, probe_tip=13)
    assert head is not None and head.number == 13  # before: None until t=58 (28 + max_age_s)


def test_a_hash_shown_again_does_not_extend_the_pause() -> None:
    """A poller shows the same hash each second: the pause runs from its first show."""
    book = HeadBook()
    book.learn("finney", header(100), now=0.0)
    for t in range(1, 40):  # the same hash, shown at every poll; its header never comes
        book.shown("finney", OTHER, now=float(t), height=None)
        book.learn("finney", header(100), now=float(t))  # the head stays fresh
    assert (
        book.fresh("finney", 32.0, max_age_s=30, probe_tip=100) is not None
    )  # 30 s after the first
