"""bench/loop_holds.py: the holds a probed proxy wrote, summed up."""

from __future__ import annotations

from pathlib import Path

from bench.loop_holds import summarise


def test_holds_are_counted_by_their_cpu(tmp_path: Path) -> None:
    f = tmp_path / "holds.txt"
    f.write_text(
        "0.700 0.650 <task_wakeup>\n"
        "5.000 0.800 <preempted: long wall, short CPU>\n"
        "2.400 2.300 <a big answer in one piece>\n"
        "1.200 1.100 <TaskStepMethWrapper>\n"
        "garbage\n"
    )
    s = summarise(f)
    assert s["holds_over_1ms"] == 2 and s["holds_over_2ms"] == 1
    assert s["longest_hold_ms"] == 2.3
    assert summarise(tmp_path / "none.txt")["longest_hold_ms"] == 0.0
