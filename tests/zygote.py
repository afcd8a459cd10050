"""One interpreter per test worker that has imported mitmproxy, the addon, the
sidecar and the simulated node, and forks a process for each of them the
tests start (``python -m tests.zygote SOCKET`` serves; ``Zygote`` asks).

Why: a ``make test`` starts ~150 mitmdump, ~110 sidecar and ~200 simulated
node processes, and each spent 0.6 to 2 s of CPU importing the same ~1,100
modules before it did anything; those processes used over half of the run's
CPU on a 2-core machine, a third less with this (docs/OPERATIONS.md, Tests). A
forked child skips that and is otherwise the process its command line would
start: its own pid, session and process group, log, working directory,
environment and exit code, running the same entry point (``mitmdump``'s,
``python -m sidecar``'s, ``python -m simnode``'s) with the same ``sys.argv``.
Anything else (another command, a CPU set to pin it to, another checkout on
``PYTHONPATH``, any other ``PYTHON*`` variable than the zygote's) starts as
before, and so does everything once the zygote cannot serve. The launcher's
own processes (``make run``, the demo, rolling reloads) never come from here:
their tests start them fresh, as an operator does.

The wire: one ``SOCK_SEQPACKET`` connection per child; the request (JSON:
argv, cwd, env) carries its stdin and output descriptors; the answer is
``pid N``, then ``exit CODE`` when the zygote has reaped it."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import io
import json
import os
import runpy
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from chainproxy.supervisor import Child, spawn

REPO = Path(__file__).resolve().parents[1]
MITMDUMP = str(Path(sys.executable).parent / "mitmdump")
MODULES = ("sidecar", "simnode")  # ``python -m`` entry points it serves
PRELOAD = (
    "mitmproxy.tools.main",
    "mitmproxy.tools.dump",
    "mitmproxy.tools.cmdline",
    "addon.addons",
    "sidecar.__main__",
    "simnode.__main__",
)
_PR_SET_PDEATHSIG = 1
MAX_REQUEST = 1 << 20


def python_env(env: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    """The variables an interpreter reads as it starts."""
    return {k: v for k, v in env.items() if k.startswith("PYTHON")}


def servable(
    argv: list[str], env: dict[str, str], cpus: set[int] | None, zygote_env: dict[str, str]
) -> bool:
    """Whether a zygote started with ``zygote_env`` starts ``argv`` as its
    command line would."""
    if cpus or python_env(env) != zygote_env:
        return False
    if argv and argv[0] == MITMDUMP:
        return True
    return len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m" and argv[2] in MODULES


# --- the zygote ------------------------------------------------------------------------


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _streams(env: dict[str, str]) -> None:
    """Standard streams as a fresh interpreter makes them for these descriptors."""
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        mode = "rb" if fd == 0 else "wb"
        raw = io.FileIO(fd, mode, closefd=False)
        tty = raw.isatty()
        if fd == 0:
            stream: io.TextIOWrapper = io.TextIOWrapper(io.BufferedReader(raw))
        else:
            # -u / PYTHONUNBUFFERED: the text layer writes straight to the descriptor
            buffered: io.RawIOBase | io.BufferedWriter = (
                raw if unbuffered else io.BufferedWriter(raw)
            )
            stream = io.TextIOWrapper(
                buffered,  # type: ignore[arg-type]
                errors="backslashreplace" if fd == 2 else "strict",
                line_buffering=tty or fd == 2,
                write_through=unbuffered,
            )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _run(argv: list[str], cwd: str) -> int:
    """The entry point ``argv`` names, as ``python`` would run it; its exit code."""
    try:
        if argv[0] == MITMDUMP:
            from mitmproxy.tools.main import mitmdump

            sys.argv = list(argv)
            sys.path[0] = str(Path(MITMDUMP).parent)
            mitmdump()
        else:
            sys.argv = [argv[2], *argv[3:]]  # run_module puts the module's file in [0]
            sys.path[0] = cwd
            sys.modules.pop(f"{argv[2]}.__main__", None)  # preloaded: run afresh, as -m does
            runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
    except SystemExit as e:
        if e.code is None:
            return 0
        if isinstance(e.code, int):
            return e.code
        print(e.code, file=sys.stderr)
        return 1
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


def _child(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: become the process ``request`` describes; never returns."""
    code = 1
    try:
        os.setsid()
        _die_with_parent()
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        stdin, out = fds
        os.dup2(stdin, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(stdin)
        os.close(out)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        _streams(request["env"])
        code = _run(request["argv"], request["cwd"])
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        # what the interpreter does at its exit: wait for non-daemon threads,
        # run atexit, flush the streams
        with contextlib.suppress(BaseException):
            threading._shutdown()  # type: ignore[attr-defined]
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        os._exit(code)


def serve(path: Path) -> None:
    """Preload, then fork a child per request until our parent is gone."""
    parent = os.getppid()
    _die_with_parent()
    for module in PRELOAD:
        __import__(module)
    if threading.active_count() != 1:  # forking would copy a thread's locks mid-use
        raise SystemExit(f"zygote: {threading.active_count()} threads after the imports")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    staging = path.with_name(path.name + ".new")
    server.bind(str(staging))
    server.listen(64)
    staging.rename(path)  # it exists once it serves
    waiting: dict[int, socket.socket] = {}  # child pid -> the connection to tell its exit
    selector = selectors.DefaultSelector()
    selector.register(server, selectors.EVENT_READ)
    while os.getppid() == parent:
        if selector.select(0.05):
            conn, _ = server.accept()
            _start(conn, server, waiting)
        _reap(waiting)


def _start(conn: socket.socket, server: socket.socket, waiting: dict[int, socket.socket]) -> None:
    try:
        conn.settimeout(5)
        message, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, 2)
        request = json.loads(message)
        assert len(fds) == 2
    except (OSError, ValueError, AssertionError):
        conn.close()
        return
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid = os.fork()
    if pid == 0:
        server.close()
        for other in waiting.values():
            other.close()
        conn.close()
        _child(request, fds)
    for fd in fds:
        os.close(fd)
    try:
        conn.send(f"pid {pid}".encode())
    except OSError:
        conn.close()  # the asker is gone: the child still runs, reaped later
        return
    waiting[pid] = conn


def _reap(waiting: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = waiting.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.send(f"exit {os.waitstatus_to_exitcode(status)}".encode())
            conn.close()


# --- asking it -------------------------------------------------------------------------


class Forked:
    """``subprocess.Popen``'s face for a child of the zygote: its pid, its exit
    code (told by the zygote, which reaps it), signals sent to it directly."""

    def __init__(self, args: list[str], conn: socket.socket, pid: int) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self._conn = conn

    def _told(self, message: bytes) -> int:
        # b"": the zygote went (it takes its children along: they die with it)
        self.returncode = int(message.split()[1]) if message.startswith(b"exit ") else -9
        self._conn.close()
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                message = self._conn.recv(64, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return None
            except OSError:
                message = b""
            self._told(message)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is not None:
            return self.returncode
        self._conn.settimeout(timeout)
        try:
            message = self._conn.recv(64)
        except TimeoutError:
            raise subprocess.TimeoutExpired(self.args, timeout or 0) from None
        except OSError:
            message = b""
        finally:
            with contextlib.suppress(OSError):
                self._conn.settimeout(None)
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

    def _up(self) -> bool:
        if self.broken:
            return False
        if self.proc is None:
            # a short path: a unix socket's is at most 107 bytes
            self.path = Path(tempfile.mkdtemp(prefix="cpz-")) / "sock"
            self.env = python_env(os.environ)
            with self.path.with_name("zygote.log").open("wb") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "tests.zygote", str(self.path)],
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
        argv: list[str],
        *,
        log: Path | None = None,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        cpus: set[int] | None = None,
    ) -> Child:
        full_env = {**os.environ, **(env or {})}
        own = python_env(os.environ) if self.env is None else self.env
        if log is None or not servable(argv, full_env, cpus, own) or not self._up():
            return spawn(name, argv, log=log, cwd=cwd, env=env, cpus=cpus)
        request = {"argv": argv, "cwd": str(cwd or os.getcwd()), "env": full_env}
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            conn.connect(str(self.path))
            with log.open("wb") as out, open(os.devnull, "rb") as devnull:
                fds = [devnull.fileno(), out.fileno()]
                socket.send_fds(conn, [json.dumps(request).encode()], fds)
            conn.settimeout(30)
            answer = conn.recv(64)
            conn.settimeout(None)
            pid = int(answer.removeprefix(b"pid "))
        except (OSError, ValueError):
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


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
