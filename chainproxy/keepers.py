"""The launcher's children kept running: the sidecar, the one proxy process,
a ``--workers N`` worker and the launcher's own redis-server are started
again when they die, instead of the whole stack stopped (RELIABILITY's
table: "a worker killed, or the launcher's own redis-server"). What goes on
meanwhile: RPC without the sidecar (the last routing snapshot, usage
spooled); HTTP on the other workers (HAProxy retries a refused call on
another); one quota per worker without Redis (each worker falls back to its
own, and shares again once Redis is back).

Each is started again after a back-off (1 s, doubling to 60 s while it keeps
dying, from 1 s again once it ran a minute; a start that fails backs off
the same way). The sidecar, the one proxy process and each worker read the
config file as they start, so a file a reload would refuse
(``chainproxy/reload.py``'s ``validate``: bad, or moving the sidecar or
``data_dir``) is not started from; the keeper waits, saying why once, until
the file is fixed. HAProxy is not: its runtime state (which slot points at
which worker) would be lost, so its death stops the stack, as any child
does that no keeper owns."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from chainproxy.reload import validate
from chainproxy.supervisor import Child, Supervisor
from common.config import Config, ConfigError

FIRST_DELAY_S = 1.0
MAX_DELAY_S = 60.0
STEADY_S = 60.0  # a child that ran this long died for a new reason: the back-off restarts
RECHECK_S = 5.0  # a child that could not be started now is tried again this often

Restart = Callable[[], Child | None]  # the child started again; None: not now (said why)


class StartFailed(Exception):
    """A start that did not come up (a worker that never answered, a spawn
    the system refused): tried again after a growing back-off, as a death."""


def say(message: str) -> None:
    print(f"chainproxy: {message}", file=sys.stderr, flush=True)


@dataclass
class Kept:
    """One kind of child kept running (the workers are one kind)."""

    name: str
    owns: Callable[[Child], bool]  # whether a dead child is one of these
    restart: Restart
    goes_on: str  # what goes on meanwhile, for the message
    # why it cannot be started now (a file a reload would refuse), or None
    check: Callable[[], str | None] = lambda: None
    clock: Callable[[], float] = time.monotonic
    said: str = ""  # the reason last said: each said once
    started_at: float = field(default=0.0)
    delay: float = 0.0
    due: float | None = None  # when the next one is started
    owed: int = 0  # deaths not yet made good

    def died(self) -> float:
        now = self.clock()
        if now - self.started_at >= STEADY_S:
            self.delay = 0.0
        self.owed += 1
        if self.due is None:
            self._back_off(now)
        return self.delay

    def _back_off(self, now: float) -> None:
        self.delay = min(MAX_DELAY_S, max(FIRST_DELAY_S, self.delay * 2))
        self.due = now + self.delay

    def tick(self) -> Child | None:
        if self.due is None or self.clock() < self.due:
            return None
        why = self.check()
        if why is not None:
            if why != self.said:
                say(f"the {self.name} is not started again: {why}")
                self.said = why
            self.due = self.clock() + RECHECK_S
            return None
        self.said = ""
        try:
            child = self.restart()
        except (StartFailed, OSError) as e:  # OSError: a spawn refused (EAGAIN, ENOMEM, EMFILE)
            self._back_off(self.clock())
            say(f"the {self.name} did not come up: {e}; trying again in {self.delay:g} s")
            return None
        if child is None:
            self.due = self.clock() + RECHECK_S
            return None
        self.started_at = self.clock()
        self.owed -= 1
        self.due = self.clock() if self.owed > 0 else None  # another one owed: next tick
        return child


class Keeper:
    """The kinds of children kept, and what happens when one dies."""

    def __init__(self, stack: Supervisor, clock: Callable[[], float] = time.monotonic) -> None:
        self.stack = stack
        self.clock = clock
        self.kept: list[Kept] = []

    def keep(
        self,
        name: str,
        owns: Callable[[Child], bool],
        restart: Restart,
        goes_on: str,
        check: Callable[[], str | None] = lambda: None,
    ) -> Kept:
        kept = Kept(name, owns, restart, goes_on, check, self.clock, started_at=self.clock())
        self.kept.append(kept)
        return kept

    def keep_one(
        self,
        name: str,
        first: Child,
        start: Callable[[], Child],
        goes_on: str,
        *,
        check: Callable[[], str | None] = lambda: None,
        on_start: Callable[[Child], None] = lambda child: None,
    ) -> Kept:
        """Keep a child of which one runs (the one started last), started
        again by ``start`` once ``check`` finds no reason against it (the
        reason said once, and tried again every ``RECHECK_S``)."""
        current = [first]

        def restart() -> Child:
            current[0] = start()
            on_start(current[0])
            return current[0]

        return self.keep(name, lambda child: child is current[0], restart, goes_on, check)

    def died(self, child: Child) -> bool:
        """``child`` exited: True when a keeper starts it again (forgotten
        here: its exit is not a reason to stop the stack)."""
        kept = next((k for k in self.kept if k.owns(child)), None)
        if kept is None:
            return False
        self.stack.forget(child)
        delay = kept.died()
        say(f"{child.exit_reason()}; starting it again in {delay:g} s ({kept.goes_on})")
        return True

    def tick(self) -> None:
        for kept in self.kept:
            if kept.tick() is not None:
                say(f"{kept.name} started again")


def file_check(config_path: str, running: Callable[[], Config]) -> Callable[[], str | None]:
    """For a child that reads the config file as it starts: why the file
    cannot be started from (one a reload would refuse), or None."""

    def check() -> str | None:
        try:
            validate(config_path, running())
        except Exception as e:  # ConfigError: the one line; anything else: its kind
            why = str(e) if isinstance(e, ConfigError) else f"cannot be read ({type(e).__name__})"
            return f"{config_path}: {why}; fix the file"
        return None

    return check
