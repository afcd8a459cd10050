"""The lean client's pooled call (``LeanTransport._reuse``/``_reused``: an idle
connection and room taken without a coroutine, the answer awaited with a
timer) against real servers on 127.0.0.1, and its places (``Slots``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from addon.upstream.forward import TransportError
from addon.upstream.lean import client as http_client
from addon.upstream.lean.client import LeanTransport
from addon.upstream.lean.conn import Slots
from tests.addon.upstream.test_http_client import OK, Raw, _answer, _keep_alive, _read_request

Server = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def second_call(then: Server) -> Callable[..., Awaitable[None]]:
    """A server whose first connection answers its first call, reads the
    second (on the pooled connection) and does ``then``; later connections
    answer every call."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        if n > 0:
            return await _keep_alive(reader, writer, n)
        await _read_request(reader)
        writer.write(_answer())
        await writer.drain()
        await _read_request(reader)
        await then(reader, writer)

    return handle


async def test_a_slow_answer_on_a_reused_connection_is_a_timeout_and_closes_it() -> None:
    async def silent(reader: asyncio.StreamReader, _: asyncio.StreamWriter) -> None:
        await reader.read()  # the second call is never answered: until the client closes

    raw = Raw(second_call(silent))
    t = LeanTransport(max_response_bytes=1_000_000)
    async with raw as url:
        assert await t.post(url, b"{}", 5) == (200, OK)
        assert t.idle_connections() == 1
        loop = asyncio.get_running_loop()
        began = loop.time()
        with pytest.raises(TransportError) as e:
            await t.post(url, b"{}", 0.2)  # on the pooled connection
        assert e.value.reason == "timeout"
        assert 0.15 <= loop.time() - began < 2.0
        await asyncio.wait_for(raw.ended.wait(), 5)  # closed, not pooled
        assert t.idle_connections() == 0
        assert await t.post(url, b"{}", 5) == (200, OK)  # a new one
        t.close()
    assert raw.connections == 2


async def test_a_cancelled_call_on_a_reused_connection_closes_it() -> None:
    started = asyncio.Event()

    async def halting(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + OK[:10])
        await writer.drain()
        started.set()
        await reader.read()

    raw = Raw(second_call(halting))
    t = LeanTransport(max_response_bytes=1_000_000)
    async with raw as url:
        assert await t.post(url, b"{}", 5) == (200, OK)
        task = asyncio.create_task(t.post(url, b"{}", 30))
        await started.wait()
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(raw.ended.wait(), 5)
        assert t.idle_connections() == 0
        assert await t.post(url, b"{}", 5) == (200, OK)  # the places were given back
        t.close()
    assert raw.connections == 2


async def test_a_reused_connection_cut_before_its_answer_goes_again_in_the_time_left() -> None:
    """The node closes a pooled connection as the call reuses it (nothing
    answered): the call goes on a new connection, within its own timeout."""
    cut = asyncio.Event()

    async def drop_second(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        cut.set()
        writer.transport.abort()  # read, never answered

    raw = Raw(second_call(drop_second))
    t = LeanTransport(max_response_bytes=1_000_000)
    async with raw as url:
        assert await t.post(url, b"{}", 5) == (200, OK)
        assert await t.post(url, b"{}", 5) == (200, OK)
        assert cut.is_set()
        t.close()
    assert raw.connections == 2


async def test_a_pooled_call_does_not_pass_callers_waiting_for_a_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With every place of a host taken and callers waiting, a connection that
    comes back idle goes to the first waiter; a new call that finds it idle
    waits behind them rather than take it (``Slots.try_take``)."""
    monkeypatch.setattr(http_client, "LIMIT_PER_HOST", 1)
    order: list[str] = []
    release, arrived = asyncio.Event(), asyncio.Event()

    async def gated(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while True:
            _, body = await _read_request(reader)
            order.append(body.decode())
            arrived.set()
            if body == b'"first"':
                await release.wait()
            writer.write(_answer())
            await writer.drain()

    raw = Raw(gated)
    t = LeanTransport(max_response_bytes=1_000_000)
    async with raw as url:
        first = asyncio.create_task(t.post(url, b'"first"', 30))
        await arrived.wait()
        waiter = asyncio.create_task(t.post(url, b'"waiter"', 30))
        await asyncio.sleep(0.05)
        release.set()
        await first
        late = await t.post(url, b'"late"', 30)  # the idle connection is the waiter's turn first
        assert late == (200, OK) and await waiter == (200, OK)
        t.close()
    assert order == ['"first"', '"waiter"', '"late"'] and raw.connections == 1


async def test_slots_are_fair_and_a_cancelled_waiter_passes_its_place_on() -> None:
    slots = Slots(1)
    assert slots.try_take() and not slots.try_take()
    got: list[str] = []

    async def take(name: str) -> None:
        await slots.take()
        got.append(name)

    a = asyncio.create_task(take("a"))
    b = asyncio.create_task(take("b"))
    c = asyncio.create_task(take("c"))
    await asyncio.sleep(0)
    assert not slots.try_take()  # callers wait: nobody passes them
    slots.release()  # handed to a, which is cancelled before it runs
    a.cancel()
    with pytest.raises(asyncio.CancelledError):
        await a
    await asyncio.sleep(0)
    assert got == ["b"]  # a's place went on to b
    b.cancel()  # done already: no effect
    slots.release()
    await c
    assert got == ["b", "c"]
    slots.release()
    assert slots.free == 1 and slots.try_take()
