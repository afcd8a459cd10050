"""One interpreter per test worker that has imported mitmproxy, the addon, the
sidecar and the simulated node, and forks a process for each of them the
tests start (``python -m tests.zygote SOCKET WORKER_PID`` serves;
``tests/zygote_client.Zygote`` asks).

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
own children (``make run``, the demo, ``chainproxy reload``) never come from
here: their tests start them fresh, as an operator does (docs/OPERATIONS.md,
Tests, for what else differs).

The wire: one ``SOCK_SEQPACKET`` connection per child; the request (JSON:
argv, cwd, env) carries its stdin and output descriptors; the answer is
``pid N``, then ``exit CODE`` when the zygote has reaped it."""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import gc
import io
import json
import os
import runpy
import selectors
import signal
import socket
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

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
    """Standard streams as a fresh interpreter makes them for these descriptors:
    the encoding and error handlers of the zygote's own (made from the same
    ``PYTHON*``/locale environment: ``servable``), the file's own buffer size,
    none under ``PYTHONUNBUFFERED``, lines on a terminal and on stderr."""
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        model = getattr(sys, f"__{name}__")
        binary: Any = io.open(  # noqa: UP020 (the descriptor, not a path)
            fd, "rb" if fd == 0 else "wb", buffering=0 if unbuffered and fd else -1, closefd=False
        )
        stream = io.TextIOWrapper(
            binary,
            encoding=model.encoding,
            errors=model.errors,
            line_buffering=fd != 0 and (os.isatty(fd) or fd == 2),
            write_through=unbuffered and fd != 0,
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


def _child(request: dict[str, Any], fds: list[int], zygote: int) -> None:
    """In the forked child: become the process ``request`` describes; never returns."""
    code = 1
    try:
        os.setsid()
        _die_with_parent()
        if os.getppid() != zygote:  # it went before the prctl: no signal would come
            os._exit(1)
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


def serve(path: Path, parent: int) -> None:
    """Preload, then fork a child per request until ``parent`` (the test
    worker) is gone."""
    _die_with_parent()
    for module in PRELOAD:
        __import__(module)
    if threading.active_count() != 1:  # forking would copy a thread's locks mid-use
        raise SystemExit(f"zygote: {threading.active_count()} threads after the imports")
    # the preloaded objects out of the collector's sight: a node or sidecar forked
    # from here would otherwise scan all three programs' objects at each full
    # collection (and copy the pages it touched), where a fresh one scans its own
    gc.collect()
    gc.freeze()
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
    fds: list[int] = []
    try:
        conn.settimeout(5)
        message, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, 2)
        request = json.loads(message)
        assert len(fds) == 2
    except (OSError, ValueError, AssertionError):
        for fd in fds:
            os.close(fd)
        conn.close()
        return
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    zygote = os.getpid()
    pid = os.fork()
    if pid == 0:
        server.close()
        for other in waiting.values():
            other.close()
        conn.close()
        _child(request, fds, zygote)
    for fd in fds:
        os.close(fd)
    try:
        conn.send(f"pid {pid}".encode())
    except OSError:
        # the asker gave up (and started the process afresh): this one has no owner
        conn.close()
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
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


if __name__ == "__main__":
    serve(Path(sys.argv[1]), int(sys.argv[2]))
