"""The launcher's sidecar, kept running: the proxies serve on their last
routing snapshot and spool their usage while it is down, so a sidecar that
dies is started again, not the stack stopped (RELIABILITY, "the sidecar
killed").

It is started again after a back-off (1 s, doubling to 60 s while it keeps
dying, from 1 s again once it ran a minute), from the config file as a reload
would take it: a file that is bad, or that moves the sidecar or ``data_dir``
(``chainproxy/reload.py``'s ``validate``), is not started from; the sidecar
waits, saying why once, until the file is fixed."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from chainproxy.commands import sidecar_argv
from chainproxy.reload import validate
from chainproxy.supervisor import Child, Supervisor
from common.config import Config, ConfigError

FIRST_DELAY_S = 1.0
MAX_DELAY_S = 60.0
STEADY_S = 60.0  # a sidecar that ran this long died for a new reason: the back-off restarts
RECHECK_S = 5.0  # a file that cannot be started from is read again this often


def _say(message: str) -> None:
    print(f"chainproxy: {message}", file=sys.stderr, flush=True)


class SidecarKeeper:
    def __init__(
        self,
        stack: Supervisor,
        config_path: str,
        running: Callable[[], Config],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stack = stack
        self.config_path = config_path
        self.running = running  # the config the stack runs now (a reload changes it)
        self.clock = clock
        self.child: Child | None = None
        self.due: float | None = None  # when a dead sidecar is started again
        self.delay = 0.0
        self.started_at = 0.0
        self._said = ""

    def start(self) -> Child:
        self.child = self.stack.start("sidecar", sidecar_argv(self.config_path))
        self.started_at = self.clock()
        return self.child

    def died(self, child: Child) -> bool:
        """``child`` exited: True when it was the sidecar, to be started again."""
        if child is not self.child:
            return False
        self.stack.forget(child)
        now = self.clock()
        if now - self.started_at >= STEADY_S:
            self.delay = 0.0
        self.delay = min(MAX_DELAY_S, max(FIRST_DELAY_S, self.delay * 2))
        self.due = now + self.delay
        _say(f"{child.exit_reason()}; starting it again in {self.delay:g} s (RPC goes on)")
        return True

    def tick(self) -> Child | None:
        """The sidecar started again, when it is due and the file allows it."""
        if self.due is None or self.clock() < self.due:
            return None
        try:
            validate(self.config_path, self.running())
        except Exception as e:  # ConfigError: the one line; anything else: its kind
            why = str(e) if isinstance(e, ConfigError) else f"cannot be read ({type(e).__name__})"
            if why != self._said:
                _say(f"the sidecar is not started from {self.config_path}: {why}; fix the file")
                self._said = why
            self.due = self.clock() + RECHECK_S
            return None
        self._said, self.due = "", None
        _say("sidecar started again")
        return self.start()
