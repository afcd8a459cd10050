"""The launcher's children kept running (``chainproxy/keepers.py``): a child
that dies is started again after a back-off, never from a file a reload would
refuse; a kind of which several run (the workers) makes good each death, one
at a time; a child no keeper owns is not its business."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from chainproxy.keepers import RECHECK_S, Keeper, StartFailed, file_check
from common.config import load_config
from tests.fakes import FakeClock


class Stack:
    """Stands in for the Supervisor: what was started and forgotten."""

    def __init__(self) -> None:
        self.started: list[Any] = []
        self.forgotten: list[Any] = []

    def start(self, name: str, argv: list[str]) -> Any:
        child = type("Child", (), {"exit_reason": lambda self: f"{name} exited with code -9"})()
        self.started.append(child)
        return child

    def forget(self, child: Any) -> None:
        self.forgotten.append(child)


def _file(tmp: Path, **top: Any) -> Path:
    path = tmp / "c.yaml"
    path.write_text(yaml.safe_dump({"data_dir": str(tmp / "data"), **top}))
    return path


def _sidecar(tmp: Path, clock: FakeClock) -> tuple[Keeper, Stack, Path]:
    path = _file(tmp)
    running = load_config(path)
    stack = Stack()
    keeper = Keeper(stack, clock)  # type: ignore[arg-type]

    def start() -> Any:
        return stack.start("sidecar", [])

    keeper.keep_one(
        "sidecar", start(), start, "RPC goes on", check=file_check(str(path), lambda: running)
    )
    return keeper, stack, path


def test_a_dead_sidecar_is_started_again_after_a_growing_back_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = FakeClock(100.0)
    keeper, stack, _ = _sidecar(tmp_path, clock)
    (kept,) = keeper.kept
    assert keeper.died(object()) is False  # another child: not the keeper's  # type: ignore[arg-type]
    delays = []
    child = stack.started[0]
    for _ in range(8):
        assert keeper.died(child) is True and stack.forgotten[-1] is child
        delays.append(kept.delay)
        keeper.tick()
        assert stack.started[-1] is child  # not yet
        clock.t += kept.delay
        keeper.tick()
        assert stack.started[-1] is not child
        child = stack.started[-1]
    assert delays == [1, 2, 4, 8, 16, 32, 60, 60]
    clock.t += 61  # it ran a minute: a new death starts from 1 s again
    keeper.died(child)
    assert kept.delay == 1
    err = capsys.readouterr().err
    assert "starting it again in 1 s (RPC goes on)" in err and "sidecar started again" in err


def test_a_file_a_reload_would_refuse_is_not_started_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = FakeClock(100.0)
    keeper, stack, path = _sidecar(tmp_path, clock)
    keeper.died(stack.started[0])
    _file(tmp_path, sidecar={"port": 9999})  # an edit that moves the sidecar
    clock.t += 1
    for _ in range(3):
        keeper.tick()
        clock.t += RECHECK_S
    assert len(stack.started) == 1
    err = capsys.readouterr().err
    assert err.count("sidecar.port: a reload cannot change it") == 1  # said once
    path.write_text("proxy: [unclosed")  # then a file that does not parse
    keeper.tick()
    assert "is not started again" in capsys.readouterr().err and len(stack.started) == 1
    _file(tmp_path)  # fixed
    clock.t += RECHECK_S
    keeper.tick()
    assert len(stack.started) == 2


def test_workers_that_die_together_are_each_made_good_and_a_failed_start_backs_off(
    capsys: pytest.CaptureFixture[str],
) -> None:
    clock = FakeClock(100.0)
    stack = Stack()
    keeper = Keeper(stack, clock)  # type: ignore[arg-type]
    workers = [stack.start("mitmdump-1", []), stack.start("mitmdump-2", [])]
    comes_up = [False]
    refused = [""]  # a file a reload would refuse: why, or ""

    def new_worker() -> Any:
        if not comes_up[0]:
            raise StartFailed("mitmdump-3 exited with code 2")  # it never answered
        workers.append(stack.start(f"mitmdump-{len(stack.started) + 1}", []))
        return workers[-1]

    keeper.keep(
        "worker",
        lambda c: c in workers,
        new_worker,
        "HTTP calls go to the others",
        check=lambda: refused[0] or None,
    )
    for w in list(workers):
        assert keeper.died(w)
        workers.remove(w)
    (kept,) = keeper.kept
    assert kept.delay == 1  # the second death waits with the first, it does not double it
    delays = []
    for _ in range(4):  # failed starts back off as deaths do
        clock.t += kept.delay
        keeper.tick()
        delays.append(kept.delay)
    assert delays == [2, 4, 8, 16] and len(stack.started) == 2
    refused[0] = "c.yaml: registry.endpoints: a reload cannot leave test with no node-rpc"
    clock.t += kept.delay
    keeper.tick()
    assert len(stack.started) == 2  # not from that file
    comes_up[0] = True
    clock.t += RECHECK_S
    keeper.tick()
    assert len(stack.started) == 2  # still refused
    refused[0] = ""
    clock.t += RECHECK_S
    keeper.tick()  # one started; the second is owed: the next tick
    keeper.tick()
    assert len(workers) == 2 and len(stack.started) == 4
    keeper.tick()
    assert len(stack.started) == 4  # nothing more owed
    err = capsys.readouterr().err
    assert err.count("worker started again") == 2
    assert err.count("is not started again: c.yaml") == 1  # said once
    assert "did not come up: mitmdump-3 exited with code 2; trying again in 2 s" in err


def test_a_spawn_the_system_refuses_is_tried_again(capsys: pytest.CaptureFixture[str]) -> None:
    clock = FakeClock(100.0)
    stack = Stack()
    keeper = Keeper(stack, clock)  # type: ignore[arg-type]
    first = stack.start("redis-server", [])
    fails = [True]

    def start() -> Any:
        if fails[0]:
            raise OSError(11, "Resource temporarily unavailable")
        return stack.start("redis-server", [])

    keeper.keep_one("redis-server", first, start, "each worker counts its own quota")
    keeper.died(first)
    clock.t += 1
    keeper.tick()  # no traceback, no stop: tried again later
    fails[0] = False
    clock.t += keeper.kept[0].delay
    keeper.tick()
    assert len(stack.started) == 2
    assert "Resource temporarily unavailable" in capsys.readouterr().err
