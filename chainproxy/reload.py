"""Reload: ``chainproxy reload`` or SIGHUP to the launcher (``chainproxy run``).

The launcher re-reads its config file and validates it first: a file that
does not load, or that changes what only a restart can change (where the
sidecar listens, ``data_dir``), is refused with the one line ``key: problem``
and nothing changes. Then:

* the sidecar gets SIGHUP: it reloads its registry in place (new and removed
  endpoints, probe settings; ``sidecar/server/reload.py``);
* with ``--workers N`` every proxy process is replaced, one at a time, each
  taken out of HAProxy's rotation and drained first (``chainproxy/rolling.py``):
  the replacements run the code and the config on disk now, so this is also
  how a code change is deployed (``git pull``, then ``chainproxy reload``);
* with one proxy process it gets SIGHUP and applies the new config in place
  (``addon/hooks/settings.py``): no socket closes, and the subscriptions, quota
  windows whose settings held, caches and upstream health carry over
  (``Runtime.reload``). Code is not reloaded that way.

The launcher writes its pid to ``data_dir/run/chainproxy.pid`` and each
reload's outcome to ``data_dir/run/reload.json`` (``chainproxy reload`` waits
for it: ``chainproxy/reload_command.py``). SIGHUP only sets a flag: the work
runs on the launcher's main thread, the one its children must be started from
(``chainproxy/supervisor.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chainproxy.rolling import RollError, WorkerPool
from chainproxy.supervisor import Child, StartError, wait_http
from common.atomic_file import write_atomic
from common.config import Config, ConfigError, load_config
from common.config.restart import restart_only

PID_FILE = "chainproxy.pid"
STATUS_FILE = "reload.json"
FINAL = ("done", "refused", "failed")
HUP_WAIT_S = 30.0  # a child started a moment ago: until it answers, before its SIGHUP


def _redis_section(running: Config, new: Config) -> str | None:
    """With ``--workers``, a ``redis:`` section added or taken away: the
    launcher chose the workers' Redis at its start (its own redis-server when
    the file had none), so new workers would keep that one, or count their
    quotas apart; only a restart applies it. (A section kept, its URL changed,
    is applied: each new worker reads it.)"""
    if (running.redis is None) == (new.redis is None):
        return None
    how = "added" if new.redis is not None else "taken away"
    return (
        f"redis: a reload of a --workers stack cannot apply a redis: section {how} "
        "(the workers' Redis was chosen at its start); restart the stack"
    )


def run_dir(config: Config) -> Path:
    return (config.data_dir / "run").resolve()


def validate(path: str, running: Config) -> Config:
    """The config at ``path`` if a reload can apply it; ``ConfigError`` if not."""
    new = load_config(path)
    if (problem := restart_only(running, new)) is not None:
        key, _, why = problem.partition(": ")
        raise ConfigError(key, why)
    return new


class ReloadRequest:
    """SIGHUP sets ``requested``; the launcher's loop does the work."""

    def __init__(self) -> None:
        self.requested = False
        signal.signal(signal.SIGHUP, self._on_signal)

    def _on_signal(self, _signum: int, _frame: object) -> None:
        self.requested = True


@dataclass
class StatusFile:
    """``reload.json``: ``{pid, seq, state, message, at}``; ``seq`` counts reloads."""

    path: Path
    seq: int = 0

    def write(self, state: str, message: str) -> None:
        doc = {
            "pid": os.getpid(),
            "seq": self.seq,
            "state": state,
            "message": message,
            "at": time.time(),
        }
        write_atomic(self.path, json.dumps(doc))  # a reader never sees half a file


def read_status(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def is_launcher(pid: int) -> bool:
    """Whether ``pid`` is a running chainproxy process (a stale pid file never
    gets another program a signal)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"chainproxy" in cmdline


def launcher_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().split("\n", 1)[0].strip())
    except (OSError, ValueError):
        return None


def reload_hint(config_path: str) -> str:
    """The command that reloads the stack running ``config_path`` (its file
    named: ``chainproxy reload`` alone looks for the stack of
    configs/finney.yaml)."""
    return f"chainproxy reload --config {shlex.quote(config_path)}"


def launcher_config(pid_file: Path) -> Path | None:
    """The config file the launcher runs, as its pid file's second line says
    (None: not said, as by a launcher before this line was written)."""
    try:
        lines = pid_file.read_text().splitlines()
    except OSError:
        return None
    return Path(lines[1]) if len(lines) > 1 and lines[1].strip() else None


def other_launcher(config: Config) -> int | None:
    """Another launcher running under this ``data_dir`` (its pid file), if any:
    a second stack there would take its pid file, then fail to bind."""
    pid = launcher_pid(run_dir(config) / PID_FILE)
    return pid if pid is not None and pid != os.getpid() and is_launcher(pid) else None


def write_pid_file(config: Config, config_path: str) -> Path:
    """This launcher's pid in ``data_dir/run``, first thing at its start (a
    ``chainproxy reload`` meanwhile waits for the stack, not "no launcher"),
    and on the next line the config file it runs (a reload of another file
    under the same ``data_dir`` is refused, not applied from this one)."""
    directory = run_dir(config)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / PID_FILE
    path.write_text(f"{os.getpid()}\n{Path(config_path).resolve()}\n")
    return path


def remove_pid_file(path: Path) -> None:
    with contextlib.suppress(OSError):
        if launcher_pid(path) == os.getpid():
            path.unlink()


@dataclass
class Reloader:
    """The launcher's side: what a SIGHUP does to the stack it runs."""

    config_path: str
    config: Config  # the one running now
    sidecar: Child
    proxy: Child | None  # the one proxy process (no --workers)
    pool: WorkerPool | None  # --workers N
    stopping: Callable[[], bool] = lambda: False  # a stop was asked for: replace no more
    proxy_url: str = ""  # the one proxy's own health URL (``/rpc/healthz``)

    def __post_init__(self) -> None:
        directory = run_dir(self.config)
        self.pid_file = write_pid_file(self.config, self.config_path)
        self.status = StatusFile(directory / STATUS_FILE)
        with contextlib.suppress(OSError):
            self.status.path.unlink()  # a previous launcher's outcome is not ours

    def close(self) -> None:
        remove_pid_file(self.pid_file)

    def run(self) -> str:
        """One reload; its outcome (also in the status file and on stderr)."""
        self.status.seq += 1
        self.status.write("running", f"reloading {self.config_path}")
        print(f"chainproxy: reload: re-reading {self.config_path}", file=sys.stderr, flush=True)
        try:
            new = validate(self.config_path, self.config)
        except ConfigError as e:
            return self._end("refused", f"{self.config_path}: {e}; nothing changed")
        except Exception as e:  # a reader's bug: the stack keeps running all the same
            traceback.print_exc()
            why = f"cannot be read ({type(e).__name__})"
            return self._end("refused", f"{self.config_path}: {why}; nothing changed")
        if self.pool is not None and (problem := _redis_section(self.config, new)) is not None:
            return self._end("refused", f"{self.config_path}: {problem}; nothing changed")
        _hup(self.sidecar, f"{self.config.sidecar.url}/healthz")  # its registry, in place
        if self.pool is None:
            assert self.proxy is not None
            _hup(self.proxy, self.proxy_url)
            self.config = new
            return self._end("done", "config applied in place (sidecar and proxy)")
        before = self.pool.pids()
        drain_s = max(self.config.proxy.drain_s, new.proxy.drain_s)
        try:
            self.pool.replace_all(drain_s, stopping=self.stopping)
        except RollError as e:
            return self._end("failed", f"{e}; workers now: {_pids(self.pool.pids())}")
        finally:
            self.config = new  # what the workers started from here on read
        return self._end(
            "done", f"workers replaced one at a time: {_pids(before)} -> {_pids(self.pool.pids())}"
        )

    def _end(self, state: str, message: str) -> str:
        self.status.write(state, message)
        print(f"chainproxy: reload {state}: {message}", file=sys.stderr, flush=True)
        return state


def _hup(child: Child, url: str, timeout_s: float = HUP_WAIT_S) -> None:
    """SIGHUP to ``child`` once it answers at ``url``: one the keeper started
    a moment ago has no handler yet, and SIGHUP's default action would end it.
    A dead one is not signalled (a keeper starts it again, from the file as it
    is then); one alive but silent for ``timeout_s`` is long past its start,
    and is signalled all the same."""
    if url:
        with contextlib.suppress(StartError):
            wait_http(url, child, timeout_s)
    child.signal_group(signal.SIGHUP)  # never to a child that exited


def _pids(pids: list[int]) -> str:
    return "pids " + ", ".join(map(str, pids))
