"""A false alarm at every stop, silenced: Python 3.12.1's asyncio streams.

A client connection mitmproxy still serves when the process stops (a
WebSocket whose client has not answered the drain's 1001 yet) has its task
cancelled by ``asyncio.run``'s clean-up. The done-callback asyncio's streams
put on that task (``StreamReaderProtocol.connection_made``'s ``callback``)
calls ``task.exception()``, which raises ``CancelledError`` for a cancelled
task: the loop prints "Exception in callback …" and a traceback on every
drain, restart and rolling reload, though nothing failed (later Pythons check
``task.cancelled()`` first, and close the transport). ``install`` puts a
filter in front of the loop's exception handlers that drops exactly that
report and hands everything else on."""

from __future__ import annotations

import asyncio
from typing import Any

_CALLBACK = "StreamReaderProtocol.connection_made.<locals>.callback"


def stream_task_cancelled(context: dict[str, Any]) -> bool:
    """The report of asyncio's stream callback meeting a cancelled task."""
    if not isinstance(context.get("exception"), asyncio.CancelledError):
        return False
    handle = context.get("handle")
    callback = getattr(handle, "_callback", None)
    return getattr(callback, "__qualname__", "") == _CALLBACK


def install(loop: asyncio.AbstractEventLoop) -> None:
    """On ``loop``: in front of the exception handler set now (mitmproxy's,
    while it runs) and of the loop's default one, which is what reports once
    mitmproxy has put back the handler it found (none) as it stops: the false
    alarm comes after that, while ``asyncio.run`` cancels what is left."""
    if getattr(loop, "chainproxy_filtered", False):
        return  # a script reload: already in front
    before = loop.get_exception_handler()
    default = loop.default_exception_handler

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if stream_task_cancelled(context):
            return
        if before is not None:
            before(loop, context)
        else:
            default(context)

    def default_handler(context: dict[str, Any]) -> None:
        if not stream_task_cancelled(context):
            default(context)

    loop.set_exception_handler(handler)
    # an attribute of this loop only, read by ``call_exception_handler`` when no
    # handler is set
    loop.default_exception_handler = default_handler  # type: ignore[method-assign]
    loop.chainproxy_filtered = True  # type: ignore[attr-defined]
