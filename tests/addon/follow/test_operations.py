"""How an operation on a pinned block ends when its legacy call fails: the
spec's ``operationInaccessible`` ("trying again may work") when no node
answered or none had the block or its state, ``operationError`` ("it would
fail again") for a node's own answer, such as a runtime call that trapped."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from addon.follow import operations
from addon.follow.follow import Follow
from addon.rpc.new_spec import CallFailed

HASH = "0x" + "ab" * 32


def _follow(sent: list[dict[str, Any]]) -> Follow:
    f = Follow(
        "f1",
        "finney",
        object(),
        lambda frame: sent.append(json.loads(frame)["params"]["result"]),
        with_runtime=True,
        max_pinned=8,
        max_operations=16,
        on_end=lambda f, reason: None,
    )
    f.greet()
    return f


@pytest.mark.parametrize(
    ("failure", "event"),
    [
        # every node asked said it has not the block (its only holder died)
        (
            CallFailed(4003, f"Client error: UnknownBlock: Header was not found: {HASH}"),
            "operationInaccessible",
        ),
        (CallFailed(-32000, "unknown block"), "operationInaccessible"),
        (CallFailed(4003, f"State already discarded for {HASH}"), "operationInaccessible"),
        # chainproxy's own: no node answered in time, none had capacity
        (CallFailed(-32603, "all upstreams failed", {"attempts": []}), "operationInaccessible"),
        (CallFailed(-32603, "busy", {"policy": "upstream_capacity"}), "operationInaccessible"),
        # the node's answer: the same call would fail the same way
        (CallFailed(4003, "Execution failed: wasm trap: unreachable"), "operationError"),
    ],
)
async def test_a_failed_call_ends_its_operation_as_the_spec_says(
    failure: CallFailed, event: str
) -> None:
    sent: list[dict[str, Any]] = []
    follow = _follow(sent)
    op = follow.new_operation("call", 1)

    async def work() -> Any:
        raise failure

    operations.run_single(follow, op, work, lambda kind, outcome: None)
    assert op.task is not None
    await asyncio.wait_for(op.task, 5)
    assert [e["event"] for e in sent] == [event]
    assert not follow.operations
