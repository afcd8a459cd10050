"""The runner's steps (``bench/run.py``): each scenario, set-up and tear-down
in turn, a failed one recorded and the others still run; what makes a
scenario's rows no result; the closing report and the run's exit code."""

from __future__ import annotations

import json
import os
import re
import resource
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.report import Report

SCENARIOS = (
    "1",
    "2",
    "3",
    "15",
    "16",
    "7",
    "4",
    "5",
    "11",
    "13",
    "14",
    "17",
    "18",
    "12",
    "10",
    "6",
    "8",
    "9",
    "19",
    "20",
    "addon",
)


@dataclass(frozen=True, slots=True)
class Step:
    name: str  # a scenario (SCENARIOS), or the set-up or tear-down it names
    fn: Callable[[], None]
    setup: str | None = None  # the set-up step this one needs: when that failed, not run


NAN = re.compile(r"\bnan\b", re.IGNORECASE)  # a figure computed from nothing


class WallLimit(BaseException):
    """The run's own time limit (SIGALRM): it ends the run, not just one step."""


def wall_limit(*_: object) -> None:
    raise WallLimit("wall limit")


def run_steps(steps: list[Step], report: Report) -> None:
    """Every step in turn; one that raises is a failure of its scenario (or, for a
    set-up, of the scenarios that need it), and the others still run."""
    failed_setups: dict[str, str] = {}
    status = report.data.setdefault("scenarios", {})
    for step in steps:
        scenario = step.name in SCENARIOS
        if step.setup in failed_setups:
            report.fail(f"not run: {step.setup} failed", step.name)
            status[step.name] = {"ok": False, "why": report.failures[step.name], "rows": []}
            continue
        report.current = step.name if scenario else ""
        rows0, goals0, t0, cpu0 = len(report.rows), len(report.goals), time.monotonic(), cpu_s()
        try:
            step.fn()
        except Exception as e:  # one step's failure must not end the run
            traceback.print_exc()
            why = f"{type(e).__name__}: {e}".strip()[:500]
            if not scenario:
                failed_setups[step.name] = why
            report.fail(why, step.name)
        elapsed = time.monotonic() - t0
        report.data.setdefault("step_s", {})[step.name] = round(elapsed, 1)
        # this process's CPU and its children's (those ended: a stack's when stopped)
        report.data.setdefault("step_cpu_s", {})[step.name] = round(cpu_s() - cpu0, 1)
        print(f"  ({step.name}: {elapsed:.0f} s)", flush=True)
        if scenario:
            rows = report.rows[rows0:]
            if step.name not in report.failures:
                why = no_figures(rows)
                if why:
                    report.fail(why, step.name)
            status[step.name] = {
                "ok": step.name not in report.failures,
                "why": report.failures.get(step.name),
                "rows": [list(r) for r in rows],
                "goals": report.goals[goals0:],
                "s": round(elapsed, 1),
            }
    report.current = ""


def cpu_s() -> float:
    """CPU seconds of this process and of its children that have ended."""
    return sum(
        r.ru_utime + r.ru_stime
        for r in (
            resource.getrusage(resource.RUSAGE_SELF),
            resource.getrusage(resource.RUSAGE_CHILDREN),
        )
    )


def no_figures(rows: list[tuple[str, str, str, str]]) -> str | None:
    """Why a scenario's rows are not a result (``?`` for a figure, ``nan`` for a
    measured one, or no figure at all), or None."""
    if not rows:
        return "no result reported"
    if any(cell.strip() == "?" for r in rows for cell in r[1:]):
        return "a figure reported as ?"
    # (in the figures: a ratio over a baseline of 0 may well be nan)
    if nan := next((r[0] for r in rows if NAN.search(f"{r[1]} {r[2]}")), None):
        return f"a figure reported as nan ({nan})"
    if not any(ch.isdigit() for r in rows for ch in r[2]):
        return "no figure reported"
    return None


def conclude(report: Report, json_path: Path | None) -> int:
    """The table, the goals, the ``--json`` file and, last, what failed: the
    run's exit code (1 when anything did)."""
    report.data["loadavg_end"] = os.getloadavg()
    report.data["failed"] = report.failures
    report.print()
    print(
        f"\n{report.data.get('elapsed_s', 0):.0f} s; load average at the end "
        f"{', '.join(f'{x:.2f}' for x in report.data['loadavg_end'])} "
        "(other work on the machine makes every number noisier)"
    )
    if json_path:
        json_path.write_text(json.dumps(report.data, indent=1, default=str))
    if report.failures:
        print(f"\nFAILED: {len(report.failures)} step(s) of this run did not measure:")
        for k, why in report.failures.items():
            print(f"  {k}: {why}")
        return 1
    return 0
