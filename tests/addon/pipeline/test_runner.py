"""The step loop (addon/pipeline/runner.py): a run resumed after a big answer
gives the event loop back before its remaining steps."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from addon.pipeline.context import RpcContext
from addon.pipeline.runner import Runner
from addon.upstream.forward import ForwardResult


class _Live:
    live = True


@pytest.mark.parametrize(("body_bytes", "ran_before"), [(1 << 20, True), (300, False)])
async def test_the_steps_after_a_big_answer_run_in_a_turn_of_their_own(
    body_bytes: int, ran_before: bool
) -> None:
    rpc = RpcContext("finney", 0.0, _Live())
    order: list[str] = []

    async def forward(rpc: RpcContext, deps: Any) -> None:
        await asyncio.sleep(0)  # the node's answer arrives
        rpc.result = ForwardResult("ok", None, (), None, body_bytes=body_bytes)
        asyncio.get_running_loop().call_soon(lambda: order.append("a call read meanwhile"))

    def store_and_answer(rpc: RpcContext, deps: Any) -> None:
        order.append("stored and answered")

    pending = Runner([forward, store_and_answer]).run(rpc, None)
    assert pending is not None
    await pending
    await asyncio.sleep(0)
    first = ["a call read meanwhile", "stored and answered"]
    assert order == (first if ran_before else first[::-1])
