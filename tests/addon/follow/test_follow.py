"""One follow (pure but for asyncio objects): events wait for the follow's id,
the pinned-block limit counts finalized blocks only and stops the follow, and
a follow is told only of pruned blocks it was told of."""

from __future__ import annotations

import json
from typing import Any

from addon.follow.follow import Follow
from addon.follow.tree import Block, BlockTree

RT = {"type": "valid", "spec": {"specVersion": 1}}


def h(n: int, fork: str = "") -> str:
    return "0x" + f"{fork}{n:x}".rjust(64, "0")


def make(max_pinned: int = 8) -> tuple[Follow, list[dict[str, Any]], list[str]]:
    sent: list[dict[str, Any]] = []
    ended: list[str] = []
    follow = Follow(
        "f1",
        "finney",
        object(),
        lambda frame: sent.append(json.loads(frame)["params"]["result"]),
        with_runtime=True,
        max_pinned=max_pinned,
        max_operations=16,
        on_end=lambda f, reason: ended.append(reason),
    )
    return follow, sent, ended


def chain(length: int) -> BlockTree:
    t = BlockTree(Block(h(10), h(9), 10, RT))
    for n in range(11, 11 + length):
        t.add(Block(h(n), h(n - 1), n))
    return t


def test_events_wait_for_the_follows_id() -> None:
    follow, sent, _ = make()
    follow.start(chain(2))
    assert sent == []
    follow.greet()
    assert [e["event"] for e in sent] == ["initialized", "newBlock", "newBlock", "bestBlockChanged"]
    assert sent[0]["finalizedBlockRuntime"] == RT
    assert sent[1]["newRuntime"] is None  # the parent's runtime


def test_the_pinned_limit_counts_finalized_blocks_only() -> None:
    follow, sent, ended = make(max_pinned=3)
    tree = chain(0)
    follow.start(tree)
    follow.greet()
    # unfinalized blocks never count: finality stalls, the follow goes on
    for n in range(11, 20):
        b = Block(h(n), h(n - 1), n)
        tree.add(b)
        follow.new_block(b, None)
    assert not ended
    # finalized and never unpinned: past 3 the follow is stopped
    tree.finalize(h(19))
    b = Block(h(20), h(19), 20)
    tree.add(b)
    follow.new_block(b, None)
    assert ended and "pinned" in ended[0]
    assert sent[-1] == {"event": "stop"}
    follow.new_block(Block(h(21), h(20), 21), None)
    assert sent[-1] == {"event": "stop"}  # nothing after the stop


def test_a_follow_is_told_only_of_pruned_blocks_it_was_told_of() -> None:
    follow, sent, _ = make()
    follow.start(chain(1))
    follow.greet()
    follow.finalized([h(11)], [h(12, "f"), h(13, "f")])
    assert sent[-1] == {
        "event": "finalized",
        "finalizedBlockHashes": [h(11)],
        "prunedBlockHashes": [],
    }
    follow.new_block(Block(h(12, "f"), h(11), 12), None)
    follow.finalized([h(12)], [h(12, "f")])
    assert sent[-1]["prunedBlockHashes"] == [h(12, "f")]
    # a block the client unpinned is still named when it is pruned (it was told
    # of it), and only once
    follow.new_block(Block(h(13, "f"), h(12), 13), None)
    follow.new_block(Block(h(13), h(12), 13), None)
    follow.unpin([h(13, "f")])
    follow.finalized([h(13)], [h(13, "f")])
    assert sent[-1]["prunedBlockHashes"] == [h(13, "f")]
    follow.finalized([h(14)], [h(13, "f")])
    assert sent[-1]["prunedBlockHashes"] == []


def test_operations_take_slots_until_they_finish() -> None:
    follow, sent, _ = make()
    follow.greet()
    op = follow.new_operation("storage", 10)
    assert follow.free_slots() == 6
    follow.finish(op, {"event": "operationStorageDone", "operationId": op.op_id})
    assert follow.free_slots() == 16
    assert sent[-1]["event"] == "operationStorageDone"
    follow.finish(op, {"event": "operationStorageDone", "operationId": op.op_id})
    assert len(sent) == 1  # a stopped or finished operation says nothing more


def test_a_pinned_blocks_header_stays_with_the_follow_until_unpinned() -> None:
    # the root's and each announced block's header as the view encoded it
    t = BlockTree(Block(h(10), h(9), 10, RT, "0xa0"))
    t.add(Block(h(11), h(10), 11, header="0xa1"))
    t.add(Block(h(12, "f"), h(11), 12, header="0xf2"))  # a fork, soon pruned
    t.add(Block(h(12), h(11), 12, header="0xa2"))
    follow, _, _ = make()
    follow.start(t)
    assert follow.headers == {h(10): "0xa0", h(11): "0xa1", h(12, "f"): "0xf2", h(12): "0xa2"}
    t.finalize(h(12))  # the fork pruned: its header stays while the follow pins it
    follow.finalized([h(11), h(12)], [h(12, "f")])
    assert follow.headers[h(12, "f")] == "0xf2"
    follow.unpin([h(12, "f"), h(10)])
    assert set(follow.headers) == {h(11), h(12)}
    # a new follow is given the headers of the recent finalized blocks it pins
    late, _, _ = make()
    late.start(t)
    assert late.headers == {h(10): "0xa0", h(11): "0xa1", h(12): "0xa2"}
    late.end("unfollowed")
    assert late.headers == {}
