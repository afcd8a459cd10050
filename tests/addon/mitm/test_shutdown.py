"""``addon/mitm/shutdown.py``: the stop's false alarm from asyncio's streams
(a served connection's task cancelled at the end) is dropped; any other
report reaches the handler that was there before."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

from addon.mitm import shutdown


async def _cancel_a_served_connection() -> None:
    """A stream server's connection task cancelled while it serves, as
    ``asyncio.run``'s clean-up cancels mitmproxy's at a stop."""
    served = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        served.set()
        await asyncio.Event().wait()  # until cancelled

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    await served.wait()
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for _ in range(3):
        await asyncio.sleep(0)  # the tasks' done-callbacks run
    writer.close()
    server.close()


async def test_the_streams_false_alarm_is_dropped_and_other_reports_pass(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    old = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    try:
        await _cancel_a_served_connection()
        # the Python this project pins reports it (a later one does not)
        reported = [c for c in seen if shutdown.stream_task_cancelled(c)]
        if sys.version_info[:3] <= (3, 12, 1):
            assert reported, seen
        seen.clear()
        shutdown.install(loop)
        shutdown.install(loop)  # a script reload: one filter, not two
        await _cancel_a_served_connection()
        assert seen == []
        loop.call_exception_handler({"message": "something else", "exception": ValueError()})
        assert [c["message"] for c in seen] == ["something else"]
        # mitmproxy, stopping, puts back the handler it found (none): the loop's
        # default one reports then, filtered too
        loop.set_exception_handler(None)
        caplog.clear()
        await _cancel_a_served_connection()
        assert not [r for r in caplog.records if r.name == "asyncio"], caplog.text
        loop.call_exception_handler({"message": "still said", "exception": ValueError()})
        assert "still said" in caplog.text
    finally:
        loop.set_exception_handler(old)


@pytest.mark.parametrize(
    "context",
    [
        {"message": "x", "exception": ValueError()},
        {"message": "x", "exception": asyncio.CancelledError()},  # no handle: not it
        {"message": "x"},
    ],
)
def test_only_that_report_is_recognised(context: dict[str, Any]) -> None:
    assert not shutdown.stream_task_cancelled(context)
