"""Identical calls in flight share one upstream call: the key ignores ids, a late
joiner still gets the answer, a leaving caller cancels nobody, a failure reaches
every waiter and the number of keys stays bounded."""

from __future__ import annotations

import asyncio

import pytest

from addon.pipeline.jsonrpc import Call
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


async def test_a_call_after_the_answer_but_before_its_starter_resumed_joins_it() -> None:
    co = Coalescer()
    started = 0
    gate = asyncio.Event()

    async def upstream() -> ForwardResult:
        nonlocal started
        started += 1
        await gate.wait()
        return _result("z")

    first = asyncio.ensure_future(co.run(b"k", upstream))
    await asyncio.sleep(0)  # the starter sent it
    task = co._inflight[b"k"]
    gate.set()
    await task  # answered; the starter resumes (and stores the answer) after this test
    assert not first.done()
    result, shared = await co.run(b"k", upstream)  # not a second upstream call
    assert shared and started == 1 and result.answers == ({"result": "z"},)
    await first
    assert len(co) == 0


async def test_the_first_caller_leaving_does_not_cancel_the_others() -> None:
    co = Coalescer()
    gate = asyncio.Event()

    async def upstream() -> ForwardResult:
        await gate.wait()
        return _result("x")

    first = asyncio.ensure_future(co.run(b"k", upstream))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(co.run(b"k", upstream))
    await asyncio.sleep(0)
    first.cancel()  # its client closed the connection
    gate.set()
    result, shared = await second
    assert shared and result.answers == ({"result": "x"},)
    assert len(co) == 0  # the key went with the call, though its starter had left


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
