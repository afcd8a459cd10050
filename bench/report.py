"""The benchmark report: one table row per measure as it is taken (printed at
once, so a long run shows progress), one line per goal, the data for the
``--json`` file, and which scenarios failed (``fail``: the runner exits
non-zero naming them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.measure import Run, cpu_req, rps

HEAD = ("scenario", "baseline", "subject", "ratio")


@dataclass
class Report:
    rows: list[tuple[str, str, str, str]] = field(default_factory=list)  # what, base, subj, ratio
    goals: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)  # scenario -> why
    current: str = ""  # the scenario the runner is in (``fail`` names it)

    def row(self, what: str, base: str, subject: str, r: str) -> None:
        self.rows.append((what, base, subject, r))
        print(f"  {what}: {base} | {subject} | {r}", flush=True)

    def fail(self, why: str, scenario: str | None = None) -> None:
        """The scenario (the current one by default) did not measure what it
        measures: the run goes on, and ends with a non-zero exit naming it."""
        key = scenario or self.current or "?"
        self.failures[key] = f"{self.failures[key]}; {why}" if key in self.failures else why
        print(f"  FAILED {key}: {why}", flush=True)

    def goal(self, line: str) -> None:
        self.goals.append(line)

    def print(self) -> None:
        w = [max(len(r[i]) for r in [*self.rows, HEAD]) for i in range(4)]
        print()
        for i, r in enumerate([HEAD, *self.rows]):
            print("| " + " | ".join(c.ljust(w[j]) for j, c in enumerate(r)) + " |")
            if i == 0:
                print("|" + "|".join("-" * (x + 2) for x in w) + "|")
        print()
        for g in self.goals:
            print(g)


def f0(x: float | None, unit: str = "") -> str:
    return "n/a" if x is None else f"{x:,.0f}{unit}"


def f1(x: float | None, unit: str = "") -> str:
    return "n/a" if x is None else f"{x:,.1f}{unit}"


def f2(x: float | None, unit: str = "") -> str:
    return "n/a" if x is None else f"{x:.2f}{unit}"


def f3(x: float | None, unit: str = "") -> str:
    return "n/a" if x is None else f"{x:.3f}{unit}"


def tput(name: str, runs: list[Run]) -> str:
    return f"{name} {f0(rps(runs))} req/s ({f0(cpu_req(runs))} µs CPU/req)"
