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


def test_a_task_step_is_named_by_where_its_coroutines_resume() -> None:
    import asyncio

    from bench.loop_holds import _resumes

    async def inner() -> None:
        await asyncio.sleep(0)

    async def outer() -> None:
        await inner()

    async def scenario() -> list[str]:
        loop = asyncio.get_running_loop()
        task = loop.create_task(outer())
        await asyncio.sleep(0)  # the task ran to its first suspension
        steps = [_resumes(h._callback) for h in list(loop._ready)]  # type: ignore[attr-defined]
        await task
        return steps

    steps = asyncio.run(scenario())
    named = [s for s in steps if s.startswith("test_a_task")]
    assert len(named) == 1
    chain = named[0].split(" > ")
    assert [c.split(":")[0].rsplit(".", 1)[-1] for c in chain] == ["outer", "inner", "sleep"]
    assert _resumes(print) == repr(print)  # a bare callback: its repr
