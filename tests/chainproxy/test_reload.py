"""``chainproxy reload`` (``chainproxy/reload_command.py``) and what the
launcher checks before it reloads (``chainproxy/reload.py``): a bad file or a
change only a restart can make is refused with one line naming the key; the
command finds the launcher by its pid file, never signals a process that is
not one, and waits for the outcome the launcher writes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from chainproxy import cli
from chainproxy.reload import (
    PID_FILE,
    STATUS_FILE,
    Reloader,
    StatusFile,
    launcher_config,
    launcher_pid,
    other_launcher,
    read_status,
    reload_hint,
    remove_pid_file,
    validate,
    write_pid_file,
)
from common.config import ConfigError, load_config


def _write(tmp: Path, name: str = "c.yaml", **top: Any) -> Path:
    doc = {"data_dir": str(tmp / "data"), **top}
    path = tmp / name
    path.write_text(yaml.safe_dump(doc))
    return path


def _reload(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = cli.main(["reload", *argv])
    return code, capsys.readouterr().err


# --- what a reload may change --------------------------------------------------------


def test_a_valid_change_passes(tmp_path: Path) -> None:
    running = load_config(_write(tmp_path))
    path = _write(tmp_path, proxy={"rate_limit": {"requests": 5}})
    assert validate(str(path), running).proxy.rate_limit.requests == 5


@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"proxy": {"rate_limit": {"requests": 0}}}, "proxy.rate_limit.requests"),
        ({"sidecar": {"port": 9999}}, "sidecar.port"),
        ({"sidecar": {"host": "0.0.0.0"}}, "sidecar.host"),
        ({"data_dir": "/somewhere/else"}, "data_dir"),
    ],
)
def test_what_cannot_be_reloaded_is_one_line_naming_the_key(
    tmp_path: Path, change: dict[str, Any], key: str
) -> None:
    running = load_config(_write(tmp_path))
    path = _write(tmp_path, "new.yaml", **change)
    with pytest.raises(ConfigError) as e:
        validate(str(path), running)
    assert e.value.key == key and "\n" not in str(e.value)


def test_a_sidecar_url_change_is_refused_without_its_password(tmp_path: Path) -> None:
    running = load_config(_write(tmp_path, sidecar={"url": "http://a:OldSecret1@127.0.0.1:8081"}))
    path = _write(tmp_path, "new.yaml", sidecar={"url": "http://a:NewSecret2@127.0.0.1:8081/x"})
    with pytest.raises(ConfigError) as e:
        validate(str(path), running)
    assert e.value.key == "sidecar.url"
    assert "Secret" not in str(e.value) and "127.0.0.1:8081" in str(e.value)


def test_the_status_file_is_replaced_whole(tmp_path: Path) -> None:
    status = StatusFile(tmp_path / STATUS_FILE)
    assert read_status(status.path) is None
    status.seq = 3
    status.write("done", "workers replaced")
    doc = read_status(status.path)
    assert doc is not None and doc["seq"] == 3 and doc["state"] == "done"
    assert not list(tmp_path.glob("*.tmp"))


# --- the command ---------------------------------------------------------------------


class _NoRoll:
    """A worker pool a refused reload must not touch."""

    def pids(self) -> list[int]:
        return [1]

    def replace_all(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("the workers were replaced")


@pytest.mark.parametrize("running_redis", [False, True])
def test_a_workers_reload_that_adds_or_takes_away_redis_is_refused(
    tmp_path: Path, running_redis: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """--workers: the launcher chose the workers' Redis at its start (its own
    redis-server without a redis: section), so a section added was reported
    done and its URL ignored, and one taken away split the quota per worker
    (one client got 200 of 240 calls through two workers at 100 a minute)."""
    redis = {"url": "redis://127.0.0.1:6390/0"}
    start = {"redis": redis} if running_redis else {}
    path = _write(tmp_path, **start)
    reloader = Reloader(str(path), load_config(path), sidecar=None, proxy=None, pool=_NoRoll())  # type: ignore[arg-type]
    try:
        _write(tmp_path, **({} if running_redis else {"redis": redis}))
        assert reloader.run() == "refused"
        err = capsys.readouterr().err
        assert "redis: a reload of a --workers stack" in err and "restart the stack" in err
        assert "taken away" in err if running_redis else "added" in err
        assert read_status(reloader.status.path)["state"] == "refused"  # type: ignore[index]
    finally:
        reloader.close()


def test_a_bad_file_is_refused_before_anything_is_signalled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, proxy={"max_batch": -3})
    code, err = _reload(capsys, "--config", str(path))
    assert code == 2 and err.count("\n") == 1
    assert "proxy.max_batch" in err and "nothing changed" in err


def test_no_launcher_running(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _reload(capsys, "--config", str(_write(tmp_path)))
    assert code == 1 and "no launcher" in err and "chainproxy run" in err


def test_a_stale_pid_file_never_signals_another_program(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path)
    other = subprocess.Popen(["sleep", "30"])
    try:
        run = tmp_path / "data" / "run"
        run.mkdir(parents=True)
        (run / PID_FILE).write_text(f"{other.pid}\n")
        code, err = _reload(capsys, "--config", str(path))
        assert code == 1 and "not a running chainproxy launcher" in err
        assert other.poll() is None  # no SIGHUP reached it
    finally:
        other.kill()
        other.wait()


# A stand-in launcher: "chainproxy" on its command line, and on SIGHUP it
# writes the outcome named by its argument, as chainproxy/reload.py does.
FAKE = textwrap.dedent(
    """
    import json, os, signal, sys, time
    status, outcome = sys.argv[1], sys.argv[2]
    def hup(*_):
        doc = {"pid": os.getpid(), "seq": 1, "state": outcome, "message": "as told"}
        open(status, "w").write(json.dumps(doc))
    signal.signal(signal.SIGHUP, hup)
    print("ready", flush=True)
    time.sleep(30)
    """
)


@pytest.fixture
def fake_launcher(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    path = _write(tmp_path)
    run = tmp_path / "data" / "run"
    run.mkdir(parents=True)
    argv = [sys.executable, "-c", FAKE, str(run / STATUS_FILE), request.param, "chainproxy"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        (run / PID_FILE).write_text(f"{proc.pid}\n")
        yield path
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    ("fake_launcher", "code"),
    [("done", 0), ("refused", 2), ("failed", 1)],
    indirect=["fake_launcher"],
)
def test_the_command_waits_for_the_launchers_outcome(
    fake_launcher: Path, code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    got, err = _reload(capsys, "--config", str(fake_launcher), "--timeout", "10")
    assert got == code and "as told" in err


def test_a_file_that_moves_data_dir_is_refused_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The launcher's pid and status files are under the data_dir it runs
    with: a file that moves data_dir is refused here, exit 2 with the one
    line (it said "no launcher running", or waited out the whole timeout)."""
    path = _write(tmp_path)
    run = tmp_path / "data" / "run"
    run.mkdir(parents=True)
    argv = [sys.executable, "-c", FAKE, str(run / STATUS_FILE), "done"]
    argv += ["chainproxy.launch", "--config", str(path)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        (run / PID_FILE).write_text(f"{proc.pid}\n")
        _write(tmp_path, data_dir=str(tmp_path / "elsewhere"))  # the operator's edit
        for extra in ((), ("--pid", str(proc.pid))):
            code, err = _reload(capsys, "--config", str(path), "--timeout", "5", *extra)
            assert code == 2, err
            assert "data_dir: a reload cannot change it" in err and err.count("\n") == 1
        assert not (run / STATUS_FILE).exists()  # never signalled
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("fake_launcher", ["done"], indirect=True)
def test_a_previous_launchers_status_file_is_not_the_outcome_awaited(
    fake_launcher: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A launcher still starting: the status file left is another launcher's
    (seq 3); this one counts from 1, and its outcome is the one read."""
    run = fake_launcher.parent / "data" / "run"
    (run / STATUS_FILE).write_text('{"pid": 1, "seq": 3, "state": "done", "message": "old"}')
    got, err = _reload(capsys, "--config", str(fake_launcher), "--timeout", "10")
    assert got == 0 and "as told" in err


@pytest.mark.parametrize("fake_launcher", ["done"], indirect=True)
def test_a_second_launcher_finds_the_first_by_its_pid_file(
    fake_launcher: Path, tmp_path: Path
) -> None:
    """A second stack on the same data_dir would take the running one's pid
    file, then fail to bind and remove it: it is refused up front instead."""
    config = load_config(fake_launcher)
    pid_file = tmp_path / "data" / "run" / PID_FILE
    running = int(pid_file.read_text())
    assert other_launcher(config) == running
    pid_file.write_text(f"{os.getpid()}\n")  # this process's own: not another
    assert other_launcher(config) is None
    pid_file.write_text("999999999\n")  # gone
    assert other_launcher(config) is None


@pytest.mark.parametrize("fake_launcher", ["done"], indirect=True)
def test_another_file_under_the_same_data_dir_is_refused_not_reported_done(
    fake_launcher: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launcher re-reads the file it runs: a reload naming a copy of it
    (same data_dir, another limit) said "done" with nothing of the copy
    applied. It is refused, naming the file that runs and the command for it;
    the file that runs, named by a relative path, still reloads."""
    run = fake_launcher.parent / "data" / "run"
    pid = launcher_pid(run / PID_FILE)
    assert pid is not None
    (run / PID_FILE).write_text(f"{pid}\n{fake_launcher.resolve()}\n")  # as the launcher writes
    copy = _write(fake_launcher.parent, "copy.yaml", proxy={"rate_limit": {"requests": 50}})
    code, err = _reload(capsys, "--config", str(copy), "--timeout", "5")
    assert code == 2 and err.count("\n") == 1, err
    assert f"runs {fake_launcher.resolve()}" in err and "nothing changed" in err
    assert f"chainproxy reload --config {fake_launcher.resolve()}" in err
    assert not (run / STATUS_FILE).exists()  # never signalled
    monkeypatch.chdir(fake_launcher.parent)
    code, err = _reload(capsys, "--config", fake_launcher.name, "--timeout", "10")
    assert code == 0 and "as told" in err


def test_the_pid_file_says_the_launchers_pid_and_file(tmp_path: Path) -> None:
    path = _write(tmp_path)
    pid_file = write_pid_file(load_config(path), str(path))
    assert launcher_pid(pid_file) == os.getpid()
    assert launcher_config(pid_file) == path.resolve()
    pid_file.write_text("123\n")  # a launcher before the second line
    assert launcher_pid(pid_file) == 123 and launcher_config(pid_file) is None
    pid_file.write_text(f"{os.getpid()}\n{path}\n")
    remove_pid_file(pid_file)  # its own: removed
    assert not pid_file.exists()


def test_the_banner_names_the_file_to_reload() -> None:
    assert reload_hint("configs/demo.yaml") == "chainproxy reload --config configs/demo.yaml"
    assert reload_hint("my configs/a.yaml") == "chainproxy reload --config 'my configs/a.yaml'"


def test_a_child_just_started_again_gets_its_sighup_once_it_answers(tmp_path: Path) -> None:
    """A reload right after the keeper started a child again: SIGHUP's default
    action would end a child that has no handler yet (its restart undone,
    its back-off doubled). It is signalled once it answers, and goes on."""
    from chainproxy.reload import _hup
    from chainproxy.supervisor import Supervisor

    seen, bound = tmp_path / "hup", tmp_path / "port"
    # its port bound first (no other test can take it), answered only once
    # its SIGHUP handler is in place, a second later
    script = textwrap.dedent(
        f"""
        import pathlib, signal, time
        from http.server import BaseHTTPRequestHandler, HTTPServer
        server = HTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
        pathlib.Path({str(bound)!r}).write_text(str(server.server_port))
        time.sleep(1.0)  # starting: no handler yet
        signal.signal(signal.SIGHUP, lambda *_: pathlib.Path({str(seen)!r}).write_text("hup"))
        server.serve_forever()
        """
    )
    stack = Supervisor(grace_s=2.0)
    child = stack.start("late", [sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 10
        while not (bound.exists() and bound.read_text()) and time.monotonic() < deadline:
            time.sleep(0.01)
        port = int(bound.read_text())
        _hup(child, f"http://127.0.0.1:{port}/healthz", timeout_s=20)
        deadline = time.monotonic() + 10
        while not seen.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert seen.read_text() == "hup" and child.alive()
    finally:
        stack.stop_all()
