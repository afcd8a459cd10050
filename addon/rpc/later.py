"""A result that arrives by callback, straight from the Redis connection's
``data_received``, instead of by waking a task.

Why: an awaited Redis round trip made every call with the shared quota a
chain of coroutines (the step, the limiter, the link's bound, the runner) plus
a loop turn for the task's wake-up, on top of the wait itself — at c=1 the
quota's main cost (docs/BENCHMARKS.md, issue 28, "the worker ceiling"). With a
``Later`` the decision is applied and the pipeline goes on from inside the
callback; only the caller that really must wait (mitmproxy's request hook, a
socket handshake, a test) awaits it, and then once for the whole run.

``then(fn)`` callbacks run synchronously, in the order they were added, when
the value (or error) arrives; one that raises fails the ``Later`` for those
after it. ``await later`` works too, and does not suspend when the value is
already there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator
from typing import Any

_UNSET: Any = object()


class Later[T]:
    __slots__ = ("_callbacks", "_error", "_future", "_value", "abandoned")

    def __init__(self) -> None:
        self._value: Any = _UNSET
        self._error: BaseException | None = None
        self._callbacks: list[Callable[[Later[T]], None]] | None = None
        self._future: asyncio.Future[None] | None = None  # only while a task awaits
        self.abandoned = False  # the task awaiting it was cancelled: nobody will read it

    @property
    def done(self) -> bool:
        return self._value is not _UNSET or self._error is not None

    def result(self) -> T:
        """The value, or the error raised; only once ``done``."""
        if self._error is not None:
            raise self._error
        if self._value is _UNSET:
            raise asyncio.InvalidStateError("Later is not done")
        return self._value

    def then(self, fn: Callable[[Later[T]], None]) -> None:
        """``fn(self)`` when done (now, if it already is)."""
        if self.done:
            fn(self)
        elif self._callbacks is None:
            self._callbacks = [fn]
        else:
            self._callbacks.append(fn)

    def resolve(self, value: T) -> None:
        if self.done:
            return
        self._value = value
        self._settle()

    def fail(self, error: BaseException) -> None:
        if self.done:
            return
        self._error = error
        self._settle()

    def _settle(self) -> None:
        callbacks, self._callbacks = self._callbacks, None
        if callbacks is not None:
            for fn in callbacks:
                try:
                    fn(self)
                except Exception as e:
                    # a callback's bug fails the Later for the ones after it (the
                    # runner answers 500), never the connection that resolved it
                    self._value, self._error = _UNSET, e
        fut = self._future
        if fut is not None and not fut.done():
            fut.set_result(None)

    def __await__(self) -> Generator[Any, None, T]:
        if not self.done:
            self._future = asyncio.get_running_loop().create_future()
            try:
                yield from self._future
            except asyncio.CancelledError:
                self.abandoned = True
                value = self._value
                if asyncio.iscoroutine(value):  # a next step nobody will run now
                    value.close()
                raise
        return self.result()
