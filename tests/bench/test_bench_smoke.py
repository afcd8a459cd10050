"""Benchmarks that cannot rot: ``bench/run.py --smoke`` runs every scenario of
``make bench`` once at its smallest size (three runners side by side, seconds
per scenario), and each must end without failing and report figures. Nothing
is timed here: a change that breaks a benchmark (a scenario that raises, a
script that exits non-zero, a stack that does not start, a ``?`` or ``nan``
for a figure) fails ``make test``, not the next ``make bench``.

wrk and nginx (``make bench-deps``, not installed by ``make test``) are not
needed: without them ``bench/pyload.py`` sends the load and HAProxy balances
scenario 7. What ``make test`` does install (redis-server and HAProxy, the npm
packages, ``.venv-asi``) is needed by scenarios 7, 10 and 12; where one is
missing those scenarios are left out of the run and the test says so at its
end (a skip: under ``CI=true`` a failure, ``tests/conftest.py``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.report import Report
from bench.smoke import lanes as smoke_lanes
from bench.smoke import unavailable
from bench.steps import SCENARIOS, Step, conclude, no_figures, run_steps

REPO = Path(__file__).resolve().parents[2]
# Scenarios the smoke run leaves out on purpose, with why: none. A scenario
# added to bench/run.py runs here from its first day.
NOT_IN_SMOKE: dict[str, str] = {}


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_every_benchmark_scenario_runs_and_reports_figures(tmp_path: Path) -> None:
    missing = {k: why for k in SCENARIOS if k not in NOT_IN_SMOKE and (why := unavailable(k))}
    run = [k for k in SCENARIOS if k not in NOT_IN_SMOKE and k not in missing]
    out = tmp_path / "smoke.json"
    argv = [sys.executable, "bench/run.py", "--smoke", "--only", ",".join(run), "--json", str(out)]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=560)
    (tmp_path / "smoke.log").write_text(done.stdout + done.stderr)  # every runner's output
    log = f"(all of it in {tmp_path / 'smoke.log'})\n{done.stdout[-8_000:]}\n{done.stderr[-2_000:]}"
    assert out.exists(), f"bench/run.py --smoke exited {done.returncode} without its report:\n{log}"
    doc = json.loads(out.read_text())
    assert not doc["failed"], f"failed: {doc['failed']}\n{log}"
    assert done.returncode == 0, log
    assert set(doc["scenarios"]) == set(run), log
    for k, status in doc["scenarios"].items():
        assert status["ok"], f"scenario {k}: {status['why']}\n{log}"
        figures = [row[2] for row in status["rows"]]
        assert any(ch.isdigit() for f in figures for ch in f), f"scenario {k}: no figure {figures}"
    if missing:
        pytest.skip(f"not run here: {missing}")


def _steps(report: Report) -> list[Step]:
    def ok() -> None:
        report.row("6. fine", "-", "12 ms", "-")

    def raises() -> None:
        raise RuntimeError("the stack would not start")

    def unknown() -> None:
        report.row("8. unknown", "?", "bench script failed", "-")

    def says_so() -> None:
        report.row("9. told", "-", "1 of 2 delivered", "-")
        report.fail("1 of 2 notifications delivered")

    return [
        Step("6", ok),
        Step("setup: a stack", raises),
        Step("1", ok, "setup: a stack"),  # never runs: its stack did not start
        Step("8", unknown),
        Step("9", says_so),
        Step("addon", lambda: None),  # no row at all
        Step("2", raises),
    ]


def test_a_failed_step_fails_its_scenario_and_the_others_run() -> None:
    report = Report()
    run_steps(_steps(report), report)
    assert set(report.failures) == {"setup: a stack", "1", "8", "9", "addon", "2"}
    assert "not run: setup: a stack failed" in report.failures["1"]
    assert report.failures["8"] == "a figure reported as ?"
    assert report.failures["9"] == "1 of 2 notifications delivered"
    assert report.failures["addon"] == "no result reported"
    assert "RuntimeError: the stack would not start" in report.failures["2"]
    status = report.data["scenarios"]
    assert status["6"]["ok"] and not status["2"]["ok"]
    assert no_figures([("3. c=1", "bare 1 ms", "chainproxy nan ms", "n/a")]) is not None
    assert no_figures([("14. x", "before 3", "after 0", "nan")]) is None  # a ratio over 0
    assert no_figures([("7. scale-out", "n/a", "n/a", "n/a")]) == "no figure reported"


def test_the_run_exits_1_naming_what_failed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    report = Report()
    run_steps(_steps(report), report)
    out = tmp_path / "run.json"
    assert conclude(report, out) == 1
    text = capsys.readouterr().out.split("FAILED: 6 step(s)")[-1]
    for k in ("setup: a stack", "1", "8", "9", "addon", "2"):
        assert f"\n  {k}: " in text
    assert "\n  6: " not in text
    assert json.loads(out.read_text())["failed"].keys() == set(report.failures)
    ok = Report()
    run_steps(_steps(ok)[:1], ok)
    assert conclude(ok, None) == 0


def test_smoke_lanes_keep_each_stack_whole_and_cover_every_scenario() -> None:
    for jobs in (1, 2, 3, 5):
        lanes = smoke_lanes(set(SCENARIOS), jobs)
        assert sorted(k for lane in lanes for k in lane) == sorted(SCENARIOS)
        assert len(lanes) <= jobs
        for group in ({"1", "2", "3", "15", "16", "7"}, {"4", "5"}):
            assert sum(1 for lane in lanes if group & set(lane)) == 1
    assert smoke_lanes({"9"}, 3) == [["9"]]
