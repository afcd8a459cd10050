"""One client socket's outgoing side: messages are gathered and written once
per loop turn, and a client that does not read what it is sent is closed
(instead of the proxy's memory growing), on both delivery paths."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from mitmproxy.test import tflow

from addon.sockets.conn import ClientConn


def conn(
    *, direct_buffer: list[int] | None, max_queued: int = 3
) -> tuple[ClientConn, dict[str, Any]]:
    seen: dict[str, Any] = {"writes": [], "injected": [], "slow": 0}
    flow = tflow.twebsocketflow()
    assert flow.websocket is not None
    flow.websocket.timestamp_end = None  # open
    master = SimpleNamespace(
        commands=SimpleNamespace(call=lambda *a: seen["injected"].append(a[3])),
        addons=SimpleNamespace(get=lambda name: None),
    )

    def on_slow(c: ClientConn) -> None:
        seen["slow"] += 1

    c = ClientConn(
        flow,
        "finney",
        "1.2.3.4",
        master=master,
        max_queued=max_queued,
        max_buffer_bytes=1000,
        on_slow=on_slow,
        direct=False,
    )
    if direct_buffer is not None:

        def write(messages: list[bytes]) -> int:
            seen["writes"].append(list(messages))
            return direct_buffer.pop(0)

        c._write = write
    return c, seen


async def test_direct_messages_are_gathered_into_one_write_per_turn() -> None:
    c, seen = conn(direct_buffer=[0, 0])
    for i in range(5):
        c.send(f"m{i}".encode())
    assert seen["writes"] == []  # not yet: at the end of this turn
    await asyncio.sleep(0)
    assert seen["writes"] == [[b"m0", b"m1", b"m2", b"m3", b"m4"]]
    c.send(b"m5")
    await asyncio.sleep(0)
    assert seen["writes"][-1] == [b"m5"] and seen["slow"] == 0


async def test_a_client_that_does_not_read_is_closed_on_the_direct_path() -> None:
    c, seen = conn(direct_buffer=[500, 5000])
    c.send(b"a")
    await asyncio.sleep(0)
    assert seen["slow"] == 0
    c.send(b"b")
    await asyncio.sleep(0)  # its socket holds more than max_buffer_bytes unsent
    assert seen["slow"] == 1 and c.closing and not c.open
    c.send(b"c")  # nothing more is sent to it
    await asyncio.sleep(0)
    assert len(seen["writes"]) == 2


async def test_a_client_that_does_not_read_is_closed_on_the_inject_path() -> None:
    c, seen = conn(direct_buffer=None, max_queued=3)
    for i in range(4):
        c.send(f"n{i}".encode())  # mitmproxy has passed none of them on yet
    assert len(seen["injected"]) == 4 and seen["slow"] == 0
    c.send(b"n4")
    assert seen["slow"] == 1 and len(seen["injected"]) == 4
    c2, seen2 = conn(direct_buffer=None, max_queued=3)
    for _ in range(10):
        c2.send(b"x")
        c2.relayed += 1  # a reading client: each one relayed
    assert seen2["slow"] == 0 and len(seen2["injected"]) == 10


async def test_a_direct_client_holding_too_many_messages_is_closed() -> None:
    """``max_queued`` holds on the direct path too: the messages still in the
    socket's buffer are counted (the newest whose bytes make up what it
    holds), not only its bytes."""
    c, seen = conn(direct_buffer=[15, 5, 18, 24], max_queued=3)
    for m in (b"aaa", b"bbb", b"ccc"):  # 5 bytes each on the wire
        c.send(m)
    await asyncio.sleep(0)
    assert list(c._held) == [5, 5, 5] and seen["slow"] == 0  # all three still there
    c.send(b"ddd")
    await asyncio.sleep(0)
    assert list(c._held) == [5] and seen["slow"] == 0  # the client read three meanwhile
    c.send(b"eee")
    c.send(b"fff")
    await asyncio.sleep(0)
    assert len(c._held) == 3 and seen["slow"] == 0  # 18 bytes: ddd's tail, eee, fff
    c.send(b"ggg")
    c.send(b"hhh")
    await asyncio.sleep(0)
    assert len(c._held) == 5 and seen["slow"] == 1 and c.closing  # 24 bytes: 5 messages
    assert [m for write in seen["writes"] for m in write] == [
        x * 3 for x in (b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h")
    ]


async def test_a_direct_client_that_reads_is_never_counted_behind() -> None:
    c, seen = conn(direct_buffer=[10, 0] * 50, max_queued=3)
    for i in range(100):  # a burst now and then, read between them
        for _ in range(2):
            c.send(f"m{i}".encode())
        await asyncio.sleep(0)
    assert seen["slow"] == 0 and not c._held
