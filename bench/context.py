"""What every benchmark scenario shares: the run's parameters, the report, the
processes (one ``Stack``) and which core runs what."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.report import Report
from bench.stack import Stack, http_json, nginx_path

CPUS = frozenset(os.sched_getaffinity(0))  # before the runner pins itself


@dataclass(frozen=True)
class Params:
    reps: int  # repetitions of the throughput/latency scenarios
    scale_reps: int  # repetitions of the scale-out scenario
    tput_s: float  # seconds per throughput run
    lat_s: float  # seconds per concurrency-1 run
    fault_reps: int  # repetitions (healthy/slow pairs) of the slow-upstream scenario
    kill_reps: int  # repetitions of the killed-upstream scenario
    slow_s: float
    kill_s: float
    warm_s: float
    mem_clients: int
    stats_quick: bool
    extras: bool  # also measure the references (nginx, mitmproxy's own dispatch)
    wall_limit_s: float  # the runner stops itself after this
    # --smoke: every scenario once at its smallest size, no pinning, nothing timed
    # that matters: does each benchmark still run and produce its figures?
    smoke: bool = False


FULL = Params(
    reps=5,
    scale_reps=4,
    tput_s=3,
    lat_s=2,
    fault_reps=6,
    kill_reps=3,
    slow_s=4,
    kill_s=8,
    warm_s=1,
    mem_clients=1_000_000,
    stats_quick=False,
    extras=True,
    wall_limit_s=900,
)
QUICK = Params(
    reps=2,
    scale_reps=1,
    tput_s=2,
    lat_s=1,
    fault_reps=1,
    kill_reps=1,
    slow_s=2,
    kill_s=3,
    warm_s=0,
    mem_clients=150_000,
    stats_quick=True,
    extras=False,
    wall_limit_s=240,
)
SMOKE = Params(
    reps=1,
    scale_reps=1,
    tput_s=0.25,  # (wrk, where installed, runs 1 s at least)
    lat_s=0.25,
    fault_reps=1,
    kill_reps=1,
    slow_s=0.5,
    kill_s=1.5,
    warm_s=0,
    mem_clients=5_000,
    stats_quick=True,
    extras=False,
    wall_limit_s=300,
    smoke=True,
)


@dataclass
class Context:
    p: Params
    tmp: Path  # logs, configs and data directories of this run
    report: Report
    stack: Stack = field(init=False)
    # proxies under test on the last core, everything else on the first
    proxy_cpus: set[int] | None = field(init=False)
    other_cpus: set[int] | None = field(init=False)
    nginx: str | None = field(init=False)

    def __post_init__(self) -> None:
        self.stack = Stack(self.tmp)
        cpus = sorted(CPUS)
        pin = len(cpus) >= 2 and not self.p.smoke  # a smoke run times nothing: no pinning
        self.proxy_cpus = {cpus[-1]} if pin else None
        self.other_cpus = {cpus[0]} if pin else None
        self.nginx = nginx_path()

    def wait_routes(
        self, sidecar: str, healthy: int, timeout: float = 30.0, settle_s: float = 1.5
    ) -> None:
        """Until the sidecar's routing snapshot has ``healthy`` upstreams in tier 0,
        and ``settle_s`` more (the addon refreshes its snapshot every second)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ValueError):
                doc = http_json(f"{sidecar}/api/v1/internal/routes/finney", timeout=2)
                if sum(1 for u in doc["upstreams"] if u["tier"] == 0) >= healthy:
                    time.sleep(settle_s)
                    return
            time.sleep(0.2)
        print(f"  (warning: {sidecar} has not seen {healthy} healthy upstream(s))", flush=True)

    def pause(self, seconds: float, smoke_s: float = 0.0) -> None:
        """A settling wait of a scenario (queues draining, counters reaching the
        sidecar): ``seconds``, or ``smoke_s`` in a smoke run, whose figures are
        not read for what they say."""
        time.sleep(smoke_s if self.p.smoke else seconds)
