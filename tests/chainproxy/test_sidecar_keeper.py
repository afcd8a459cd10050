"""The launcher's sidecar kept running (``chainproxy/sidecar_keeper.py``): a
sidecar that dies is started again after a back-off, never from a file a
reload would refuse; another child's death is not its business."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from chainproxy.sidecar_keeper import SidecarKeeper
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


def test_a_dead_sidecar_is_started_again_after_a_growing_back_off(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(tmp_path)
    running = load_config(path)
    stack, clock = Stack(), FakeClock(100.0)
    keeper = SidecarKeeper(stack, str(path), lambda: running, clock)  # type: ignore[arg-type]
    first = keeper.start()
    assert keeper.died(object()) is False  # another child: not the keeper's
    delays = []
    child = first
    for _ in range(8):
        assert keeper.died(child) is True and stack.forgotten[-1] is child
        delays.append(keeper.delay)
        assert keeper.tick() is None  # not yet
        clock.t += keeper.delay
        child = keeper.tick()
        assert child is stack.started[-1]
    assert delays == [1, 2, 4, 8, 16, 32, 60, 60]
    clock.t += 61  # it ran a minute: a new death starts from 1 s again
    keeper.died(child)
    assert keeper.delay == 1
    assert "starting it again in 1 s (RPC goes on)" in capsys.readouterr().err


def test_a_file_a_reload_would_refuse_is_not_started_from(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(tmp_path)
    running = load_config(path)
    stack, clock = Stack(), FakeClock(100.0)
    keeper = SidecarKeeper(stack, str(path), lambda: running, clock)  # type: ignore[arg-type]
    keeper.died(keeper.start())
    _file(tmp_path, sidecar={"port": 9999})  # an edit that moves the sidecar
    clock.t += 1
    for _ in range(3):
        assert keeper.tick() is None
        clock.t += 5
    err = capsys.readouterr().err
    assert err.count("sidecar.port: a reload cannot change it") == 1  # said once
    path.write_text("proxy: [unclosed")  # then a file that does not parse
    assert keeper.tick() is None and "is not started from" in capsys.readouterr().err
    _file(tmp_path)  # fixed
    clock.t += 5
    assert keeper.tick() is stack.started[-1] and len(stack.started) == 2
