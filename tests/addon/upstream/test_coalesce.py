"""Identical calls in flight share one upstream call: the key ignores ids, the
starter runs it in its own task, a leaving follower cancels nobody, a leaving
starter leaves the followers to send it again, a failure reaches every waiter
and the number of keys stays bounded."""

from __future__ import annotations

import asyncio

import pytest

from addon.rpc.jsonrpc import Call
from addon.upstream.coalesce import Coalescer, coalesce_key
from addon.upstream.forward import ForwardResult

H = "0x" + "ab" * 32

OTHER = "0x" + "cd" * 32


def _result(tag: str) -> ForwardResult:
    return ForwardResult("ok", ({"result": tag},), (), None)


def test_the_key_ignores_ids_and_keeps_everything_else() -> None:
    a = coalesce_key("finney", [Call(1, "state_call", ["X", "0x", H])], False)
    b = coalesce_key("finney", [Call("other", "state_call", ["X", "0x", H])], False)
    assert a == b
    assert a != coalesce_key("test", [Call(1, "state_call", ["X", "0x", H])], False)
    assert a != coalesce_key("finney", [Call(1, "state_call", ["X", "0x", OTHER])], False)
    assert a != coalesce_key("finney", [Call(1, "state_call", ["X", "0x", H])], True)


async def test_identical_calls_in_flight_share_one_upstream_call() -> None:
    co = Coalescer()
    started = 0
    gate = asyncio.Event()

    async def upstream() -> ForwardResult:
        nonlocal started
        started += 1
        await gate.wait()
        return _result("shared")

    waiters = [asyncio.ensure_future(co.run(b"k", upstream)) for _ in range(30)]
    await asyncio.sleep(0.01)
    gate.set()
    got = await asyncio.gather(*waiters)
    assert started == 1
    assert [shared for _, shared in got].count(False) == 1  # one sent it, 29 shared it
    assert all(r.answers == ({"result": "shared"},) for r, _ in got)
    assert len(co) == 0  # done: the next identical call goes upstream again
    await co.run(b"k", upstream)
    assert started == 2


async def test_the_starter_runs_the_call_in_its_own_task_and_the_key_leaves_with_it() -> None:
    """No task per distinct call: the starter sends it itself, and takes the key
    out in the same step as it gets the answer (nothing can slip in between)."""
    co = Coalescer()
    ran_in: list[asyncio.Task[object] | None] = []
    gate = asyncio.Event()

    async def upstream() -> ForwardResult:
        ran_in.append(asyncio.current_task())
        await gate.wait()
        return _result("z")

    async def starter() -> tuple[ForwardResult, bool, int]:
        result, shared = await co.run(b"k", upstream)
        return result, shared, len(co)  # right as it resumes, before any other step

    first = asyncio.ensure_future(starter())
    await asyncio.sleep(0)
    assert ran_in == [first] and len(co) == 1
    before = len(asyncio.all_tasks())
    follower = asyncio.ensure_future(co.run(b"k", upstream))
    await asyncio.sleep(0)
    assert len(asyncio.all_tasks()) == before + 1  # the follower's own, nothing more
    gate.set()
    result, shared, keys = await first
    assert not shared and keys == 0 and result.answers == ({"result": "z"},)
    assert await follower == (result, True) and ran_in == [first]


async def test_a_follower_leaving_cancels_nobody() -> None:
    co = Coalescer()
    gate = asyncio.Event()

    async def upstream() -> ForwardResult:
        await gate.wait()
        return _result("x")

    first = asyncio.ensure_future(co.run(b"k", upstream))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(co.run(b"k", upstream))
    third = asyncio.ensure_future(co.run(b"k", upstream))
    await asyncio.sleep(0)
    second.cancel()  # its client closed the connection
    gate.set()
    assert await first == (_result("x"), False) and await third == (_result("x"), True)
    assert len(co) == 0


async def test_the_first_caller_leaving_does_not_leave_the_others_without_an_answer() -> None:
    """The starter's call ran in its task and goes with it: the followers send it
    again, once, the first of them for all (and whatever it got, they get)."""
    co = Coalescer()
    started = 0
    gate = asyncio.Event()

    async def upstream() -> ForwardResult:
        nonlocal started
        started += 1
        await gate.wait()
        return _result(f"x{started}")

    first = asyncio.ensure_future(co.run(b"k", upstream))
    await asyncio.sleep(0)
    others = [asyncio.ensure_future(co.run(b"k", upstream)) for _ in range(3)]
    await asyncio.sleep(0)
    first.cancel()  # its client closed the connection
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.sleep(0)
    assert started == 2 and len(co) == 1  # sent again by one follower
    gate.set()
    got = await asyncio.gather(*others)
    assert [r.answers for r, _ in got] == [({"result": "x2"},)] * 3
    assert [s for _, s in got] == [False, True, True]
    assert len(co) == 0


async def test_a_starter_left_alone_cancels_its_call() -> None:
    co = Coalescer()
    cancelled = asyncio.Event()

    async def upstream() -> ForwardResult:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return _result("never")

    first = asyncio.ensure_future(co.run(b"k", upstream))
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.sleep(0)
    assert cancelled.is_set() and len(co) == 0


async def test_a_failure_reaches_every_waiter_and_the_bound_holds() -> None:
    co = Coalescer(max_keys=1)

    async def broken() -> ForwardResult:
        await asyncio.sleep(0.01)
        raise RuntimeError("session closed")

    calls = 0

    async def fine() -> ForwardResult:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.01)
        return _result("y")

    a = asyncio.ensure_future(co.run(b"a", broken))
    b = asyncio.ensure_future(co.run(b"a", broken))
    await asyncio.sleep(0)
    c1 = asyncio.ensure_future(co.run(b"c", fine))  # bound reached: not shared
    c2 = asyncio.ensure_future(co.run(b"c", fine))
    for f in (a, b):
        with pytest.raises(RuntimeError):
            await f
    assert [s for _, s in await asyncio.gather(c1, c2)] == [False, False] and calls == 2
