"""``chainproxy reload [--config F] [--pid PID] [--timeout S]``: ask the
running launcher of ``F`` to reload (``chainproxy/reload.py``) and wait for
the outcome, like ``systemctl reload``.

The file is validated here first, so a bad one is refused with its one line
before anything is signalled (exit 2); so is a file other than the one the
launcher runs (its pid file says which), which a reload would not read. The
launcher is found by the pid file in the config's ``data_dir/run`` (or
``--pid``), and must be a chainproxy process: a stale pid file never gets
another program a SIGHUP. Exit 0 when
the reload is done, 2 when the launcher refused the file, 1 otherwise."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from chainproxy.reload import (
    FINAL,
    PID_FILE,
    STATUS_FILE,
    is_launcher,
    launcher_config,
    launcher_pid,
    read_status,
    reload_hint,
    run_dir,
)
from common.config import ConfigError, load_config


def _launchers_of(config_path: str) -> list[int]:
    """The chainproxy launchers running with ``config_path``, by their command
    line (``chainproxy run|demo|inspect --config F``, ``-m chainproxy.launch``)."""
    want = Path(config_path).resolve()
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
            cwd = Path(os.readlink(d / "cwd"))
        except OSError:
            continue
        launch = b"chainproxy.launch" in argv or (
            any(Path(os.fsdecode(a)).name == "chainproxy" for a in argv[:2])
            and any(a in (b"run", b"demo", b"inspect") for a in argv[1:3])
        )
        given = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == b"--config"]
        given += [a[len(b"--config=") :] for a in argv if a.startswith(b"--config=")]
        if launch and any((cwd / os.fsdecode(g)).resolve() == want for g in given):
            found.append(int(d.name))
    return found


def _say(message: str) -> None:
    print(f"chainproxy: {message}", file=sys.stderr, flush=True)


DEFAULT_TIMEOUT_S = 600.0  # workers are replaced one at a time: each starts, then drains


def reload_command(
    config_path: str, pid: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
) -> int:
    try:
        config = load_config(config_path)
    except ConfigError as e:
        _say(f"{config_path}: {e}; nothing changed")
        return 2
    directory = run_dir(config)
    recorded = launcher_pid(directory / PID_FILE)
    running = [pid] if pid is not None else _launchers_of(config_path)
    if recorded is None or (pid is not None and recorded != pid):
        if running and all(is_launcher(p) for p in running):
            # a stack of this file runs, not under its data_dir: the file moved it
            _say(
                f"{config_path}: data_dir: a reload cannot change it (the launcher, pid "
                f"{running[0]}, does not run under {config.data_dir}); restart the stack"
                "; nothing changed"
            )
            return 2
        if pid is None:
            _say(
                f"no launcher of {config_path} is running (no {directory / PID_FILE}); "
                "start it with `chainproxy run`"
            )
            return 1
    pid = pid if pid is not None else recorded
    assert pid is not None
    if not is_launcher(pid):
        _say(f"process {pid} is not a running chainproxy launcher (a stale pid file?)")
        return 1
    runs = launcher_config(directory / PID_FILE) if pid == recorded else None
    if runs is not None and runs != Path(config_path).resolve():
        # another file under the same data_dir: the launcher would re-read its own
        # and say "done", and the operator would believe this one live
        _say(
            f"{config_path}: the stack under {config.data_dir} (launcher pid {pid}) runs "
            f"{runs}, and a reload re-reads that file, never another: edit it and run "
            f"`{reload_hint(str(runs))}`; nothing changed"
        )
        return 2
    status_path = directory / STATUS_FILE
    last = read_status(status_path) or {}
    # a previous launcher's file: the new one counts from 0 again
    before = last.get("seq", 0) if last.get("pid") == pid else 0
    os.kill(pid, signal.SIGHUP)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        doc = read_status(status_path)
        if doc and doc.get("pid") == pid and doc.get("seq", 0) > before:
            if doc.get("state") in FINAL:
                _say(f"reload {doc['state']}: {doc.get('message', '')}")
                return {"done": 0, "refused": 2}.get(str(doc["state"]), 1)
        if not is_launcher(pid):
            _say(f"the launcher (pid {pid}) exited during the reload")
            return 1
        time.sleep(0.1)
    _say(f"no outcome within {timeout_s:.0f} s; see the launcher's output")
    return 1
