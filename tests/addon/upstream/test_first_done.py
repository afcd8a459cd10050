"""``first_done``: the racers done when the first ends, or none when the
timeout passes first; a racer still running runs on."""

from __future__ import annotations

import asyncio
from typing import Any

from addon.upstream.hedge import first_done


async def _answer(delay: float, value: int) -> tuple[int, bytes]:
    await asyncio.sleep(delay)
    return value, b""


def test_the_first_racer_to_end_wakes_the_wait() -> None:
    async def scenario() -> None:
        fast = asyncio.ensure_future(_answer(0, 1))
        slow = asyncio.ensure_future(_answer(60, 2))
        running: dict[Any, Any] = {fast: None, slow: None}
        done = await first_done(running, 30)
        assert done == [fast]
        assert not slow.done()  # the loser runs on (it finishes unheard)
        slow.cancel()

    asyncio.run(scenario())


def test_the_timeout_passing_first_returns_nothing_done() -> None:
    async def scenario() -> None:
        slow = asyncio.ensure_future(_answer(60, 2))
        assert await first_done({slow: None}, 0) == []
        assert not slow.done()
        slow.cancel()

    asyncio.run(scenario())


def test_a_racer_already_done_is_returned_without_waiting() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        done_already: asyncio.Future[tuple[int, bytes]] = loop.create_future()
        done_already.set_result((200, b""))
        assert await first_done({done_already: None}, None) == [done_already]  # type: ignore[dict-item]

    asyncio.run(scenario())
