"""Asking the test worker's zygote (``tests/zygote.py``) for a child:
``Zygote.spawn`` has ``chainproxy.supervisor.spawn``'s signature and returns a
``Child`` whose process is ``Forked``, ``subprocess.Popen``'s face for a
process this worker did not fork itself."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from chainproxy.supervisor import Child, spawn
from tests.zygote import REPO, python_env, servable


class Forked:
    """``subprocess.Popen``'s face for a child of the zygote: its pid, its exit
    code (told by the zygote, which reaps it), signals sent to it directly."""

    def __init__(self, args: list[str], conn: socket.socket, pid: int) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self._conn = conn
        self._lock = threading.Lock()  # the soak smoke restarts processes from threads

    def _told(self, message: bytes) -> int:
        if message.startswith(b"exit "):
            self.returncode = int(message.split()[1])
        else:  # b"": the zygote went; its children got SIGTERM: make sure they are gone
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
            self.returncode = -signal.SIGKILL
        self._conn.close()
        return self.returncode

    def poll(self) -> int | None:
        with self._lock:
            if self.returncode is None:
                # non-blocking: a timeout a wait left on the socket would make a
                # recv with MSG_DONTWAIT wait for it and raise TimeoutError
                self._conn.settimeout(0.0)
                try:
                    message = self._conn.recv(64)
                except (BlockingIOError, TimeoutError):
                    return None
                except OSError:
                    message = b""
                self._told(message)
            return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if timeout is not None and timeout <= 0:  # Popen's: a look, then TimeoutExpired
            if self.poll() is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                if self.returncode is not None:
                    return self.returncode
                # short slices, so that another thread's poll is never held long
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise subprocess.TimeoutExpired(self.args, timeout or 0)
                self._conn.settimeout(0.1 if left is None else min(0.1, left))
                try:
                    message = self._conn.recv(64)
                except TimeoutError:
                    continue
                except OSError:
                    message = b""
                return self._told(message)

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The spawner of a test worker: ``spawn``'s signature, the zygote's children
    where it can (started on first use), ``spawn`` itself otherwise."""

    def __init__(self) -> None:
        self.path = Path()
        self.proc: subprocess.Popen[bytes] | None = None
        self.env: dict[str, str] | None = None  # its PYTHON* variables, once started
        self.broken = False
        self.started = 0  # children forked (for the suite's own test)
        self._lock = threading.Lock()

    def _up(self) -> bool:
        with self._lock:
            return self._start()

    def _start(self) -> bool:
        if self.broken:
            return False
        if self.proc is None:
            # Started from the main thread only: it dies with the thread that
            # started it (PR_SET_PDEATHSIG), and a test's helper thread ends early.
            if threading.current_thread() is not threading.main_thread():
                return False
            # a short path: a unix socket's is at most 107 bytes
            self.path = Path(tempfile.mkdtemp(prefix="cpz-")) / "sock"
            self.env = python_env(os.environ)
            with self.path.with_name("zygote.log").open("wb") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "tests.zygote", str(self.path), str(os.getpid())],
                    cwd=REPO,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            atexit.register(self.stop)
        deadline = time.monotonic() + 60
        while not self.path.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.broken = True  # the rest start as before
                return False
            time.sleep(0.02)
        return True

    def spawn(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log: Path | None = None,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        cpus: set[int] | None = None,
    ) -> Child:
        argv = list(argv)
        full_env = {**os.environ, **(env or {})}
        own = python_env(os.environ) if self.env is None else self.env
        if log is None or not servable(argv, full_env, cpus, own) or not self._up():
            return spawn(name, argv, log=log, cwd=cwd, env=env, cpus=cpus)
        request = json.dumps({"argv": argv, "cwd": str(cwd or os.getcwd()), "env": full_env})
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with log.open("wb") as out, open(os.devnull, "rb") as devnull:  # as spawn's errors
            try:
                conn.connect(str(self.path))
                socket.send_fds(conn, [request.encode()], [devnull.fileno(), out.fileno()])
            except OSError:  # too large a request (EMSGSIZE), or the zygote is gone
                conn.close()
                self.broken = self.proc is None or self.proc.poll() is not None
                return spawn(name, argv, log=log, cwd=cwd, env=env, cpus=cpus)
        try:
            conn.settimeout(30)
            answer = conn.recv(64)
            conn.settimeout(None)
            pid = int(answer.removeprefix(b"pid "))
        except (OSError, ValueError):
            # no answer: the zygote kills what it forks once it cannot tell us its pid
            conn.close()
            self.broken = True
            return spawn(name, argv, log=log, cwd=cwd, env=env, cpus=cpus)
        self.started += 1
        return Child(name, Forked(argv, conn, pid), log)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(5)
        if self.proc is not None:
            shutil.rmtree(self.path.parent, ignore_errors=True)
