"""The ``--workers N`` proxy processes as HAProxy server slots, and the
rolling restart that replaces them one at a time without a failed call.

For each worker in turn:

1. start the replacement on a fresh loopback port and wait until it answers;
2. take it into the rotation on the spare slot (``Balancer.enable``);
3. take the old one out (``drain``: HAProxy sends it nothing new) and give
   connections HAProxy was opening to it a moment to land;
4. SIGTERM it: it drains (``addon/hooks/drain.py``): its listening socket closes,
   every call in flight is answered, WebSocket clients get close 1001 and
   reconnect through HAProxy to a live worker; it exits within
   ``proxy.drain_s``;
5. its slot goes to maintenance and is the spare for the next one.

A call HAProxy sends to a worker that just stopped listening is refused and
sent again to another at once (``retry-on``, ``option redispatch 1`` in the
generated config). If a replacement does not come up, the restart stops
there: the replacement is stopped, the workers still running keep serving,
and the error says why.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from chainproxy.balancer import Balancer, BalancerError
from chainproxy.supervisor import Child, StartError, Supervisor, free_port, wait_http

SETTLE_S = 0.3  # after "drain": a connection HAProxy was opening lands before the SIGTERM
EXIT_MARGIN_S = 5.0  # beyond drain_s before an old worker is killed


class RollError(RuntimeError):
    """A rolling restart stopped before every worker was replaced."""


@dataclass
class Slot:
    name: str  # HAProxy's server name (w1, w2, …)
    port: int | None = None
    child: Child | None = None  # None: the spare (in maintenance)


@dataclass
class WorkerPool:
    stack: Supervisor
    balancer: Balancer
    worker_argv: Callable[[int], list[str]]  # a worker's command line, for its port
    slots: list[Slot] = field(default_factory=list)
    started: int = 0  # workers started so far: each gets a name of its own
    balancer_child: Child | None = None  # the HAProxy process
    # the launcher's own redis-server, and how to start it again (None: the config's)
    redis: tuple[Child, Callable[[], Child]] | None = None

    def start_worker(self, port: int) -> Child:
        self.started += 1
        return self.stack.start(f"mitmdump-{self.started}", self.worker_argv(port))

    def live(self) -> list[Slot]:
        return [s for s in self.slots if s.child is not None]

    def pids(self) -> list[int]:
        return [s.child.pid for s in self.live() if s.child is not None]

    def replace_all(self, drain_s: float, stopping: Callable[[], bool] = lambda: False) -> None:
        """Replace every live worker, one at a time (see the module docstring)."""
        for slot in self.live():
            if stopping():
                raise RollError("stopped: the launcher is stopping")
            self.replace(slot, drain_s)

    def replace(self, old: Slot, drain_s: float) -> None:
        if old.child is None:
            raise RollError(f"{old.name} has no worker to replace")
        self._in_spare(f"the replacement of {old.name}")
        self.balancer.set_state(old.name, "drain")
        time.sleep(SETTLE_S)
        retired = old.child
        old.child = None  # the spare from now on (in maintenance once it has gone)
        self.stack.forget(retired)  # its exit is expected: not a reason to stop the stack
        retired.stop(signal.SIGTERM, grace_s=drain_s + EXIT_MARGIN_S)
        self.balancer.set_state(old.name, "maint")
        old.port = None

    def stop(self, drain_s: float) -> None:
        """The stack stops: HAProxy stops listening but keeps the connections it
        holds (its soft stop, SIGUSR1), and every worker drains at once, its
        answers and its WebSocket clients' 1001 going out through HAProxy;
        then the caller stops the rest. (All at once, HAProxy went first and cut
        every client: no answer, no 1001.)"""
        if self.balancer_child is not None:
            self.balancer_child.signal_group(signal.SIGUSR1)
        workers = [s.child for s in self.live() if s.child is not None]
        for child in workers:
            child.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + drain_s + EXIT_MARGIN_S
        for child in workers:
            child.wait_or_kill(deadline - time.monotonic())

    def owns(self, child: Child) -> bool:
        """Whether ``child`` is a worker in a slot (not one being replaced)."""
        return any(s.child is child for s in self.slots)

    def lost(self, child: Child) -> None:
        """A worker died: its slot out of the rotation, a spare from now on
        (HAProxy already sends its calls on to the others: ``retry-on``)."""
        for slot in self.slots:
            if slot.child is child:
                slot.child, slot.port = None, None
                try:
                    self.balancer.set_state(slot.name, "maint")
                except BalancerError:
                    pass  # HAProxy's check takes it out all the same

    def add_worker(self) -> Child:
        """A new worker in a spare slot, once it answers (a dead one's place)."""
        return self._in_spare("a new worker")

    def _in_spare(self, what: str) -> Child:
        """A worker started on a fresh port and taken into the rotation on a
        spare slot, once it answers."""
        spare = next((s for s in self.slots if s.child is None), None)
        if spare is None:
            raise RollError(f"no spare HAProxy slot for {what}")
        port = free_port()
        child = self.start_worker(port)
        try:
            wait_http(f"http://127.0.0.1:{port}/healthz", child, 60.0)
            self.balancer.enable(spare.name, port)
        except (StartError, BalancerError) as e:
            self._abandon(child, spare)
            raise RollError(f"{what} did not come up: {e}") from None
        spare.port, spare.child = port, child
        return child

    def _abandon(self, child: Child, spare: Slot) -> None:
        self.stack.forget(child)
        child.stop(signal.SIGTERM, grace_s=5.0)
        try:
            self.balancer.set_state(spare.name, "maint")
        except BalancerError:
            pass  # it was never enabled: the spare stays what it was
