"""A mitmproxy script for the benchmarks, loaded beside chainproxy's
(``mitmdump -s addon/rpcproxy.py -s bench/loop_holds.py``): every event-loop
callback that held the loop longer than ``HOLD_MS`` is appended to the file
named by ``CHAINPROXY_HOLDS_FILE``, one line each: wall ms, the thread's CPU
ms, what ran. A hold is how long every other call on the loop waited: what
issue 37 bounds at ~2 ms for a big answer. Never loaded by the product.

``summarise`` reads such a file (pure)."""

from __future__ import annotations

import asyncio.events
import os
import time
from pathlib import Path
from typing import Any

HOLD_MS = 0.5
_run = asyncio.events.Handle._run


def _resumes(callback: Any) -> str:
    """A task step's coroutine chain, innermost last, where it resumes: which
    call's stage held the loop (a bare callback: its repr)."""
    task = getattr(callback, "__self__", None)
    coro = task.get_coro() if isinstance(task, asyncio.Task) else None
    if coro is None:
        return repr(callback)
    names: list[str] = []
    while coro is not None and len(names) < 12:
        frame = getattr(coro, "cr_frame", None)
        if frame is None:
            break
        names.append(f"{frame.f_code.co_qualname}:{frame.f_lineno}")
        coro = getattr(coro, "cr_await", None)
    return " > ".join(names) or repr(callback)


def _timed(self: asyncio.events.Handle) -> None:
    where = _resumes(getattr(self, "_callback", None))  # before it runs: where it was
    t, c = time.perf_counter(), time.thread_time()
    _run(self)
    ms = (time.perf_counter() - t) * 1000
    if ms > HOLD_MS:
        cpu = (time.thread_time() - c) * 1000
        what = where[:400].replace("\n", " ")
        with open(os.environ["CHAINPROXY_HOLDS_FILE"], "a") as f:
            f.write(f"{ms:.3f} {cpu:.3f} {what}\n")


if os.environ.get("CHAINPROXY_HOLDS_FILE"):
    asyncio.events.Handle._run = _timed  # type: ignore[method-assign]


def summarise(path: Path) -> dict[str, Any]:
    """The holds of a file: how many were over 1 and 2 ms of CPU, the longest
    (CPU: a wall time also counts the machine preempting the process)."""
    cpu: list[float] = []
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split(" ", 2)
            try:
                cpu.append(float(parts[1]))
            except (IndexError, ValueError):
                continue
    cpu.sort()
    return {
        "holds_over_1ms": sum(1 for x in cpu if x > 1.0),
        "holds_over_2ms": sum(1 for x in cpu if x > 2.0),
        "longest_hold_ms": cpu[-1] if cpu else 0.0,
        "hold_p99_ms": cpu[min(len(cpu) - 1, int(0.99 * len(cpu)))] if cpu else 0.0,
    }
