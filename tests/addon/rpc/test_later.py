"""``Later`` (``addon/rpc/later.py``): a result handed on by callback as it
arrives, awaitable by whoever must wait, without a coroutine of its own."""

from __future__ import annotations

import asyncio

import pytest

from addon.rpc.later import Later


def test_callbacks_run_in_order_when_resolved_and_at_once_after() -> None:
    later: Later[int] = Later()
    seen: list[tuple[str, int]] = []
    later.then(lambda d: seen.append(("first", d.result())))
    later.then(lambda d: seen.append(("second", d.result())))
    assert not later.done and seen == []
    later.resolve(7)
    assert later.done and seen == [("first", 7), ("second", 7)]
    later.then(lambda d: seen.append(("late", d.result())))  # already done: now
    later.resolve(8)  # a second value is ignored
    assert seen[-1] == ("late", 7) and later.result() == 7


def test_a_failing_callback_fails_the_later_for_those_after_it() -> None:
    later: Later[int] = Later()
    after: list[BaseException] = []

    def broken(d: Later[int]) -> None:
        raise RuntimeError("a bug")

    def next_one(d: Later[int]) -> None:
        with pytest.raises(RuntimeError) as e:
            d.result()
        after.append(e.value)

    later.then(broken)
    later.then(next_one)
    later.resolve(1)  # the resolver (a connection's data_received) is not hurt
    assert len(after) == 1 and str(after[0]) == "a bug"


async def test_awaiting_a_done_later_does_not_suspend() -> None:
    later: Later[str] = Later()
    later.resolve("now")
    # the value is there: no future, no loop turn
    assert await later == "now"
    failed: Later[str] = Later()
    failed.fail(ValueError("no"))
    with pytest.raises(ValueError, match="no"):
        await failed


async def test_an_awaiting_task_wakes_when_resolved_after_the_callbacks() -> None:
    later: Later[int] = Later()
    order: list[str] = []
    later.then(lambda d: order.append("callback"))

    async def waiter() -> None:
        await later
        order.append("task")

    task = asyncio.ensure_future(waiter())
    await asyncio.sleep(0)
    asyncio.get_running_loop().call_soon(later.resolve, 3)
    await task
    assert order == ["callback", "task"]


async def test_a_cancelled_waiter_abandons_it_and_an_unrun_next_step_is_closed() -> None:
    later: Later[object] = Later()

    async def next_step() -> None:
        raise AssertionError("never run")

    task = asyncio.ensure_future(_await(later))
    await asyncio.sleep(0)
    step = next_step()
    later.resolve(step)  # the task is woken, but cancelled before it runs
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert later.abandoned
    assert step.cr_frame is None  # closed: no "never awaited" warning


async def _await(later: Later[object]) -> object:
    return await later
