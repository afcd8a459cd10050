"""The process supervisor every stack uses (launcher, benchmarks, e2e harness,
chopsticks): a child that fails to start says why, and stopping leaves nothing
behind, not even when the parent is killed outright."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from chainproxy.supervisor import (
    StartError,
    Supervisor,
    free_port,
    spawn,
    wait_http,
    wait_port,
    wait_until,
)

PY = sys.executable


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie still answers kill(0); it no longer runs
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def _eventually_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return False


def test_a_child_that_exits_while_awaited_names_its_code_and_log(tmp_path: Path) -> None:
    child = spawn(
        "broken",
        [PY, "-c", "import sys; print('bad config: proxy.networks'); sys.exit(3)"],
        log=tmp_path / "broken.log",
    )
    with pytest.raises(StartError) as info:
        wait_http(f"http://127.0.0.1:{free_port()}/healthz", child, timeout_s=10)
    assert str(info.value).startswith("broken exited with code 3:\n")
    assert "bad config: proxy.networks" in str(info.value)


def test_a_child_that_never_gets_ready_times_out_naming_what_it_waited_for(
    tmp_path: Path,
) -> None:
    child = spawn("sleeper", [PY, "-c", "import time; time.sleep(60)"], log=tmp_path / "s.log")
    port = free_port()
    try:
        with pytest.raises(StartError, match=rf"^sleeper: port {port} not open after 0.3s"):
            wait_port(port, child, timeout_s=0.3)
    finally:
        child.stop()
    assert not child.alive()


def test_waiting_also_watches_the_other_children(tmp_path: Path) -> None:
    sup = Supervisor(logdir=tmp_path)
    dead = sup.start("nodes", [PY, "-c", "raise SystemExit(1)"])
    slow = sup.start("sidecar", [PY, "-c", "import time; time.sleep(60)"])
    try:
        with pytest.raises(StartError, match=r"^nodes exited with code 1"):
            wait_until(lambda: False, slow, "not ready", 10, also=sup.children)
        assert sup.first_dead() is dead
    finally:
        sup.stop_all()


def test_stop_all_kills_what_ignores_sigterm_and_its_whole_group(tmp_path: Path) -> None:
    # The child ignores SIGTERM and starts a grandchild of its own (like nginx's
    # workers): both are gone after the grace period.
    script = textwrap.dedent(
        f"""
        import signal, subprocess, sys, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        p = subprocess.Popen([{PY!r}, "-c", "import time; time.sleep(60)"])
        print(p.pid, flush=True)
        time.sleep(60)
        """
    )
    sup = Supervisor(logdir=tmp_path, grace_s=0.5)
    stubborn = sup.start("stubborn", [PY, "-c", script])
    polite = sup.start("polite", [PY, "-c", "import time; time.sleep(60)"])
    wait_until(lambda: stubborn.output().strip().isdigit(), stubborn, "no grandchild", 10)
    grandchild = int(stubborn.output())
    started = time.monotonic()
    sup.stop_all()
    assert time.monotonic() - started < 5  # one grace period for all, then SIGKILL
    assert polite.popen.returncode == -signal.SIGTERM
    assert stubborn.popen.returncode == -signal.SIGKILL
    assert _eventually_gone(grandchild)


def test_children_die_with_a_parent_killed_outright(tmp_path: Path) -> None:
    parent_script = textwrap.dedent(
        f"""
        import time
        from chainproxy.supervisor import spawn
        child = spawn("child", [{PY!r}, "-c", "import time; time.sleep(60)"])
        print(child.pid, flush=True)
        time.sleep(60)
        """
    )
    parent = subprocess.Popen(
        [PY, "-c", parent_script], stdout=subprocess.PIPE, text=True, cwd=tmp_path
    )
    try:
        assert parent.stdout is not None
        child_pid = int(parent.stdout.readline())
        assert not _gone(child_pid)
        parent.kill()  # SIGKILL: no handler, no finally
        parent.wait(10)
        assert _eventually_gone(child_pid), "the child outlived its parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_a_reserved_port_is_never_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    # the launcher's listen port (HAProxy binds it after the workers' ports are
    # picked) is reserved: no pick from the range gives it out
    from chainproxy import supervisor

    monkeypatch.setattr(supervisor, "_given", {})
    monkeypatch.setenv(supervisor.PORT_RANGE_ENV, "31000-31039")
    reserved = set(range(31000, 31040, 2))
    supervisor.reserve(*reserved)
    picks = {free_port() for _ in range(15)}
    assert len(picks) == 15 and not picks & reserved


def test_port_slices_cut_this_range_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    from chainproxy import supervisor

    monkeypatch.setenv(supervisor.PORT_RANGE_ENV, "20000-25999")
    slices = supervisor.port_slices(3)
    assert slices == ["20000-21999", "22000-23999", "24000-25999"]
    monkeypatch.delenv(supervisor.PORT_RANGE_ENV)
    spans = [tuple(map(int, s.split("-"))) for s in supervisor.port_slices(2)]
    assert spans[0][1] < spans[1][0] and spans[0][0] >= 20000 and spans[1][1] <= 32000
