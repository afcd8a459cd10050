"""Measuring the proxies: a load run against one target with the CPU its
processes spent, targets run alternately, and the medians and ratios the
report is made of."""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.load import LoadResult, run_load

RPC_PATH = "/rpc/v1/finney"
# the targets' names, as the table and the --json file show them
BARE, CP, LEAN = "bare mitmdump", "chainproxy", "chainproxy lean"
PLAIN, NGINX = "chainproxy, mitmproxy's dispatch", "nginx (1 worker)"
BEFORE = "chainproxy before"
RR = "nginx round robin"


def _cpu_seconds(pid: int) -> float:
    """utime+stime of ``pid`` and its direct children (nginx's workers)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        p = int(stat.parent.name)
        if p == pid or int(fields[1]) == pid:
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def schedstat(pid: int) -> tuple[float, float]:
    """Seconds ``pid``'s threads have run on a CPU, and waited in a run queue for
    one (ready to run while other processes had the core: on a shared machine,
    the part of a proxy's latency that is nobody's code)."""
    run = wait = 0.0
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            on, delay, _ = (task / "schedstat").read_text().split()
        except (OSError, ValueError):
            continue
        run, wait = run + int(on) / 1e9, wait + int(delay) / 1e9
    return run, wait


@dataclass
class Target:
    name: str
    url: str  # base URL
    pids: list[int] = field(default_factory=list)  # the processes whose CPU counts

    def cpu(self) -> float:
        return sum(_cpu_seconds(p) for p in self.pids)


@dataclass
class Run:
    load: LoadResult
    cpu_us_per_req: float | None


def measure(
    t: Target,
    body: bytes,
    conns: int,
    seconds: float,
    tool: str | None = None,
    rate: float = 0,
    distinct: bool = False,
) -> Run:
    c0 = t.cpu() if t.pids else None
    load = run_load(
        t.url + RPC_PATH,
        body,
        connections=conns,
        duration_s=seconds,
        tool=tool,
        rate=rate,
        distinct=distinct,
    )
    cpu = None
    if c0 is not None and load.requests:
        cpu = (t.cpu() - c0) / load.requests * 1e6
    return Run(load, cpu)


def alternate(
    targets: list[Target], body: bytes, conns: int, seconds: float, reps: int, warm_s: float
) -> dict[str, list[Run]]:
    """Every target once per repetition, the order rotated each time."""
    for t in targets:
        if warm_s > 0:
            run_load(t.url + RPC_PATH, body, connections=conns, duration_s=warm_s)
    out: dict[str, list[Run]] = {t.name: [] for t in targets}
    for rep in range(reps):
        order = targets[rep % len(targets) :] + targets[: rep % len(targets)]
        for t in order:
            out[t.name].append(measure(t, body, conns, seconds))
    return out


def med(runs: list[Run], key: Callable[[Run], float | None]) -> float | None:
    values = [v for v in (key(r) for r in runs) if v is not None]
    return statistics.median(values) if values else None


def rps(runs: list[Run]) -> float | None:
    return med(runs, lambda r: r.load.rps)


def p50(runs: list[Run]) -> float | None:
    return med(runs, lambda r: r.load.p50_ms)


def p99(runs: list[Run]) -> float | None:
    return med(runs, lambda r: r.load.p99_ms)


def cpu_req(runs: list[Run]) -> float | None:
    return med(runs, lambda r: r.cpu_us_per_req)


def errors(runs: list[Run]) -> int:
    return sum(r.load.errors for r in runs)


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def summary(runs: dict[str, list[Run]]) -> dict[str, Any]:
    """Medians and every repetition of each target, for the ``--json`` file."""
    return {
        name: {
            "rps": rps(rr),
            "p50_ms": p50(rr),
            "p99_ms": p99(rr),
            "cpu_us_per_req": cpu_req(rr),
            "errors": errors(rr),
            "reps": [
                {
                    "rps": round(x.load.rps, 1),
                    "p50_ms": x.load.p50_ms,
                    "p99_ms": x.load.p99_ms,
                    "cpu_us": None if x.cpu_us_per_req is None else round(x.cpu_us_per_req),
                }
                for x in rr
            ],
        }
        for name, rr in runs.items()
    }
