"""Child processes that never outlive their parent.

The launcher (``make run`` / ``make demo``), the benchmark stacks, the e2e
harness and the chopsticks stack all start processes and need the same three
things, so they are written once, here:

* **spawn**: each child leads a process group of its own, so stopping it also
  stops whatever it started (nginx's workers, npm's node), and a Ctrl-C in the
  terminal reaches only the parent, which then stops the children in order.
  Each child also asks the kernel for SIGTERM when its parent goes
  (``PR_SET_PDEATHSIG``): even a ``kill -9`` of the parent leaves no orphans.
  The kernel sends it when the *thread* that started the child ends, so start
  children from a thread that lives as long as they should (the main thread).
* **wait**: until a URL answers, a port accepts or a check holds, under a
  deadline; a child that exits meanwhile, or the deadline, raises
  ``StartError`` with the child's exit code and the tail of its log.
* **stop**: SIGTERM to the group, SIGKILL after a grace period;
  ``Supervisor.stop_all`` stops the children in reverse start order (the proxy
  before the sidecar before the nodes) under one deadline.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from chainproxy.port_owner import session_listens

_PR_SET_PDEATHSIG = 1
# Loaded here, not in the child: a dlopen between fork and exec can deadlock on
# a lock another thread of the parent held at the fork.
try:
    _LIBC: ctypes.CDLL | None = ctypes.CDLL("libc.so.6", use_errno=True)
except OSError:  # not glibc/Linux: children just do not get the signal
    _LIBC = None

TAIL_CHARS = 3000  # of a child's log, in errors: the end is where it says why


class StartError(RuntimeError):
    """A child exited, or did not get ready in time, while we waited for it."""


# ``lo-hi``: free_port picks from this range only. The test suite gives each of its
# parallel workers a range of its own below the kernel's ephemeral ports, so two
# workers never hand out the same port, and no outgoing connection's source port
# (taken from the ephemeral range) can take a port between its pick and its bind.
PORT_RANGE_ENV = "CHAINPROXY_PORTS"
_given: dict[int, None] = {}  # the last RECENT ports given out, oldest first
RECENT = 512


def _port_range() -> tuple[int, int] | None:
    spec = os.environ.get(PORT_RANGE_ENV, "")
    lo, sep, hi = spec.partition("-")
    if not sep or not lo.isdigit() or not hi.isdigit() or not 1024 <= int(lo) < int(hi) < 65536:
        return None
    return int(lo), int(hi)


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def reserve(*ports: int) -> None:
    """Never give out ``ports`` here: ports this process was told to use (its
    listen port, its sidecar's) that a child binds later than ``free_port()``'s
    other picks are bound (a worker, a Redis of ours could take one first)."""
    for port in ports:
        _given[port] = None


# where processes that pick side by side take their ports when no range is set:
# below the kernel's ephemeral ports (32768-60999 by default), so no outgoing
# connection's source port takes one between its pick and its bind
SIDE_BY_SIDE_PORTS = (20000, 31999)


def port_slices(n: int, within: tuple[int, int] | None = None) -> list[str]:
    """``n`` disjoint ``$CHAINPROXY_PORTS`` values for ``n`` processes that each
    pick ports at the same time (each with a memory of its own): ``within``
    (lo, hi, both included), else this process's range, else
    ``SIDE_BY_SIDE_PORTS``, cut in ``n``."""
    lo, hi = within or _port_range() or SIDE_BY_SIDE_PORTS
    span = (hi - lo + 1) // max(1, n)
    return [f"{lo + i * span}-{lo + (i + 1) * span - 1}" for i in range(n)]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now: from
    ``$CHAINPROXY_PORTS`` when set (never one this process gave out before), else
    one the kernel picks."""
    if (bounds := _port_range()) is not None:
        lo, hi = bounds
        for _ in range(4 * (hi - lo)):
            port = random.randint(lo, hi)
            if port not in _given and _bindable(port):
                _given[port] = None
                if len(_given) > RECENT:
                    del _given[next(iter(_given))]
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Process(Protocol):
    """What a ``Child`` uses of its process: ``subprocess.Popen``'s face (the test
    suite's pre-imported interpreter forks children behind the same one,
    ``tests/zygote.py``)."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...


@dataclass
class Child:
    name: str
    popen: Process
    log: Path | None = None  # its stdout and stderr; None: they are ours (the launcher)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log and self.log.exists() else ""

    def exit_reason(self) -> str:
        """``<name> exited with code N``, and the end of its log when it has one."""
        why = f"{self.name} exited with code {self.popen.returncode}"
        return f"{why}:\n{tail}" if (tail := self.output()[-TAIL_CHARS:]) else why

    def signal_group(self, sig: int) -> None:
        """``sig`` to the child's whole process group, if it is still there (a
        child already reaped: never, its pid may be another's by now)."""
        if self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)

    def stop(self, sig: int = signal.SIGTERM, grace_s: float = 10.0) -> int | None:
        """``sig``, then SIGKILL if it is still alive after ``grace_s``; its exit code."""
        if self.alive():
            self.signal_group(sig)
            self.wait_or_kill(grace_s)
        return self.popen.returncode

    def wait_or_kill(self, grace_s: float) -> None:
        """Wait for it to exit; SIGKILL its group after ``grace_s``."""
        try:
            self.popen.wait(max(0.1, grace_s))
        except subprocess.TimeoutExpired:
            self.signal_group(signal.SIGKILL)
            self.popen.wait(5)


def _child_setup(parent: int, cpus: set[int] | None) -> Callable[[], None]:
    """What runs in the child between fork and exec."""

    def setup() -> None:
        if _LIBC is not None:
            _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != parent:  # the parent went before prctl: no signal would come
                os._exit(1)
        if cpus:  # best effort: a core may be offline or outside our cgroup
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, cpus)

    return setup


def spawn(
    name: str,
    argv: Sequence[str],
    *,
    log: Path | None = None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    cpus: set[int] | None = None,
) -> Child:
    """Start ``argv`` in a process group of its own that dies with us.

    ``log``: the file for its stdout and stderr (stdin is then /dev/null);
    without it the child shares our terminal. ``env``: variables added to ours.
    ``cpus``: pin it, and every thread it starts, to these cores."""
    setup = _child_setup(os.getpid(), cpus)
    full_env = {**os.environ, **env} if env else None
    if log is None:
        popen = subprocess.Popen(
            list(argv), cwd=cwd, env=full_env, start_new_session=True, preexec_fn=setup
        )
        return Child(name, popen)
    with log.open("wb") as fh:  # the child has its own copy of the descriptor
        popen = subprocess.Popen(
            list(argv),
            stdout=fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            env=full_env,
            start_new_session=True,
            preexec_fn=setup,
        )
    return Child(name, popen, log)


# ``spawn``'s signature: what a ``Supervisor`` starts its children with (the test
# suite's zygote, ``tests/zygote_client.py``, has the same one)
Spawner = Callable[..., Child]


# --- waiting ------------------------------------------------------------------------------


def wait_until(
    ready: Callable[[], bool],
    child: Child,
    what: str,
    timeout_s: float = 30.0,
    *,
    also: Iterable[Child] = (),
    poll_s: float = 0.05,
) -> None:
    """Poll ``ready()`` until it holds. ``StartError`` if ``child`` (or one of
    ``also``) exits first, or after ``timeout_s``: "<child>: <what> after Ns"."""
    watched = [child, *also]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for c in watched:
            if not c.alive():
                raise StartError(c.exit_reason())
        if ready():
            return
        time.sleep(poll_s)
    why = f"{child.name}: {what} after {timeout_s:g}s"
    tail = child.output()[-TAIL_CHARS:]
    raise StartError(f"{why}:\n{tail}" if tail else why)


def answers_http(url: str) -> bool:
    """Whether ``url`` gives any HTTP answer (an error status is an answer too)."""
    try:
        with urllib.request.urlopen(url, timeout=1):
            return True
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False


def accepts(port: int, host: str = "127.0.0.1") -> bool:
    """Whether ``host:port`` accepts a TCP connection."""
    try:
        with socket.create_connection((host, port), 0.5):
            return True
    except OSError:
        return False


def wait_http(
    url: str, child: Child, timeout_s: float = 30.0, *, also: Iterable[Child] = ()
) -> None:
    """Until ``url`` answers, from ``child`` (see ``wait_until``; ``port_owner``:
    a port another process took between ``free_port()`` and the child's bind
    answers too, and must not count)."""
    port = urllib.parse.urlsplit(url).port

    def ready() -> bool:
        return answers_http(url) and (port is None or session_listens(child.pid, port))

    wait_until(ready, child, f"{url} not answering", timeout_s, also=also)


def wait_port(port: int, child: Child, timeout_s: float = 30.0) -> None:
    """Until 127.0.0.1:``port`` accepts, on a socket of ``child``'s (see ``wait_until``)."""
    wait_until(
        lambda: accepts(port) and session_listens(child.pid, port),
        child,
        f"port {port} not open",
        timeout_s,
    )


# --- a set of children --------------------------------------------------------------------


@dataclass
class Supervisor:
    """The children of one stack: started with one log directory and working
    directory, stopped together."""

    logdir: Path | None = None  # each child logs to <logdir>/<name>.log; None: our terminal
    cwd: Path | None = None
    grace_s: float = 10.0  # for stop_all: SIGTERM, then SIGKILL after this
    children: list[Child] = field(default_factory=list)
    spawner: Spawner | None = None  # how ``start`` starts a child: ``spawn`` by default

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cpus: set[int] | None = None,
    ) -> Child:
        log = self.logdir / f"{name}.log" if self.logdir is not None else None
        start = self.spawner or spawn
        return self.adopt(start(name, argv, log=log, cwd=self.cwd, env=env, cpus=cpus))

    def adopt(self, child: Child) -> Child:
        """Stop ``child`` with the others (one started elsewhere)."""
        self.children.append(child)
        return child

    def forget(self, child: Child) -> None:
        """No longer stop ``child`` here (it was stopped, and replaced)."""
        with contextlib.suppress(ValueError):
            self.children.remove(child)

    def first_dead(self) -> Child | None:
        return next((c for c in self.children if not c.alive()), None)

    def stop_all(self) -> None:
        """SIGTERM every child, last started first, then SIGKILL whatever is left
        when ``grace_s`` has passed: one deadline for all, so stopping a stack
        takes at most that long however many children it has."""
        live = [c for c in reversed(self.children) if c.alive()]
        for c in live:
            c.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for c in live:
            c.wait_or_kill(deadline - time.monotonic())

    def run_until_stopped(
        self, stop: StopRequest, tick: Callable[[], None] | None = None, poll_s: float = 0.2
    ) -> Child | None:
        """In the foreground: until a stop is requested (None) or a child exits
        (that child). ``tick`` runs on every poll."""
        while not stop.requested:
            if (dead := self.first_dead()) is not None:
                return dead
            if tick is not None:
                tick()
            time.sleep(poll_s)
        return None


class StopRequest:
    """SIGINT and SIGTERM set ``requested`` instead of ending the process, so a
    foreground stack gets to stop its children in order (and say so)."""

    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        self.requested = True
