"""``bench/run.py --smoke``: every scenario once at its smallest size, split over
``--jobs`` runners side by side (nothing in a smoke run is timed, so they may
share the cores: three runners take about a third of the wall time), merged
into one report with one exit code.

Scenarios that share a stack stay in one runner (``GROUPS``); the groups go
to the runners heaviest first, each to the runner with the least work so far
(``lanes``). Each runner is ``bench/run.py --smoke --jobs 1 --only …`` with a
log and a ``--json`` file of its own; its log is printed when it ends, and
its rows, goals and failures join the report. A runner that ends without its
``--json`` file fails all of its scenarios."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from bench.redis_stack import missing_tools
from bench.report import Report
from bench.stack import NGINX_STREAM_MODULE, REPO, nginx_path
from bench.steps import SCENARIOS
from chainproxy.supervisor import PORT_RANGE_ENV, Child, port_slices, spawn

# scenarios that share a stack, and a rough weight: seconds of a smoke run alone
GROUPS: tuple[tuple[tuple[str, ...], float], ...] = (
    (("1", "2", "3", "15", "16", "7"), 40),
    (("4", "5"), 10),
    (("11",), 20),
    (("13",), 30),
    (("14",), 20),
    (("17",), 25),
    (("18",), 15),
    (("12",), 45),
    (("10",), 25),
    (("6", "8", "9", "addon"), 15),
    (("19", "20"), 8),
    (("21",), 15),
)


def lanes(only: set[str], jobs: int) -> list[list[str]]:
    """The scenarios of ``only`` in at most ``jobs`` lanes, whole groups each,
    heaviest first to the lightest lane; empty lanes left out."""
    work = [0.0] * max(1, jobs)
    out: list[list[str]] = [[] for _ in work]
    for group, weight in sorted(GROUPS, key=lambda g: -g[1]):
        mine = [k for k in group if k in only]
        if mine:
            i = min(range(len(work)), key=lambda j: work[j])
            work[i] += weight
            out[i] += mine
    return [lane for lane in out if lane]


def run_lanes(only: set[str], jobs: int, tmp: Path, report: Report) -> None:
    """Every lane in a runner of its own, all at once; their results into
    ``report`` in the scenarios' usual order."""
    runners: list[tuple[int, list[str], Child, Path, float]] = []
    try:
        chosen = lanes(only, jobs)
        # each runner picks its ports from a slice of ours: side by side, with a
        # memory of its own each, they would take each other's between pick and bind
        slices = port_slices(len(chosen))
        for i, lane in enumerate(chosen):
            out = tmp / f"runner-{i + 1}.json"
            argv = [
                sys.executable,
                str(REPO / "bench" / "run.py"),
                "--smoke",
                "--jobs",
                "1",
                "--only",
                ",".join(lane),
                "--json",
                str(out),
            ]
            child = spawn(
                f"runner-{i + 1}",
                argv,
                log=tmp / f"runner-{i + 1}.log",
                cwd=REPO,
                env={PORT_RANGE_ENV: slices[i]},
            )
            runners.append((i + 1, lane, child, out, time.monotonic()))
            print(f"  runner {i + 1}: scenarios {', '.join(lane)}", flush=True)
        results: dict[str, dict[str, Any]] = {}
        pending = list(runners)
        while pending:
            time.sleep(0.2)
            for r in [r for r in pending if not r[2].alive()]:
                pending.remove(r)
                n, lane, child, out, t0 = r
                rc = child.popen.returncode
                print(
                    f"\n---- runner {n} (scenarios {', '.join(lane)}): exit {rc}"
                    f" after {time.monotonic() - t0:.0f} s; its output ----",
                    flush=True,
                )
                print(child.output().rstrip(), flush=True)
                print(f"---- end of runner {n} ----", flush=True)
                _collect(n, lane, rc, out, results, report)
        for k in SCENARIOS:
            if k in results:
                doc = results[k]
                report.rows += [tuple(row) for row in doc["rows"]]  # type: ignore[misc]
                report.goals += doc.get("goals", [])
                report.data.setdefault("scenarios", {})[k] = doc
        report.data["runners"] = [
            {"scenarios": lane, "exit": child.popen.returncode} for _, lane, child, _, _ in runners
        ]
    finally:
        for _, _, child, _, _ in runners:
            child.stop()


def _collect(
    n: int,
    lane: list[str],
    rc: int | None,
    out: Path,
    results: dict[str, dict[str, Any]],
    report: Report,
) -> None:
    """One runner's ``--json`` file into ``results`` and the report's failures."""
    try:
        doc = json.loads(out.read_text())
    except (OSError, ValueError):
        for k in lane:
            report.fail(f"not run to its end: runner {n} exited {rc} without its results", k)
            results[k] = {"ok": False, "why": report.failures[k], "rows": []}
        return
    for k, why in doc.get("failed", {}).items():
        report.fail(why, k)
    for k in lane:
        status = doc.get("scenarios", {}).get(k)
        if status is None:
            report.fail(f"runner {n} reported nothing for it (exit {rc})", k)
            status = {"ok": False, "why": report.failures[k], "rows": []}
        results[k] = status
    if rc != 0 and not doc.get("failed"):
        report.fail(f"runner {n} exited {rc}", f"runner {n}")


def unavailable(scenario: str) -> str | None:
    """Why ``scenario`` cannot run on this machine (a tool that ``make test``
    installs is missing: ``make scale-deps``, ``js-deps``, ``asi-deps``), or None.
    wrk and nginx are never needed: ``bench/pyload.py`` and HAProxy stand in."""
    from chainproxy.workers import find_tool

    if scenario == "7":
        if find_tool("haproxy") is None and not (nginx_path() and NGINX_STREAM_MODULE.exists()):
            return "scenario 7 needs HAProxy or nginx's stream module (make scale-deps)"
    elif scenario == "10":
        return missing_tools()
    elif scenario == "12":
        from tests.clients.js_deps import js_deps_current, js_unavailable
        from tests.clients.sync_runs import ASI_READY

        if why := js_unavailable():
            return f"scenario 12: {why}"
        if not js_deps_current():
            return "scenario 12: chopsticks not installed (make js-deps)"
        if not ASI_READY.exists():
            return "scenario 12: async-substrate-interface's venv missing (make asi-deps)"
    return None
