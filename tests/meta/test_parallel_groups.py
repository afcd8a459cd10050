"""`make test`'s workers (tests/conftest.py's scheduler): a module's tests run
in one worker, the client tests together, the contract modules together, and the
groups that start processes go first. Run in a child pytest with two xdist
workers over a throw-away tree laid out like ``tests/``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from tests.conftest import group_of

REPO = Path(__file__).resolve().parents[2]

BODY = """
import json, os, time
from pathlib import Path

def _note(name):
    out = Path(os.environ["GROUPS_OUT"])
    module = "/".join(Path(__file__).parts[-3:])  # tests/<dir>/test_x.py
    row = {"module": module, "worker": os.environ["PYTEST_XDIST_WORKER"], "at": time.monotonic()}
    (out / f"{module.replace('/', '.')}.{name}.json").write_text(json.dumps(row))
    time.sleep(0.05)
"""

MODULES = {
    "tests/clients/test_c1.py": "clients",
    "tests/clients/test_c2.py": "clients",
    "tests/e2e/test_wire.py": "contract",
    "tests/e2e/test_open_proxy.py": "contract",
    "tests/e2e/test_other_e2e.py": "e2e",
    "tests/common/test_u1.py": "unit",
    "tests/common/test_u2.py": "unit",
    "tests/sidecar/test_u3.py": "unit",
}


def _tree(root: Path) -> None:
    (root / "conftest.py").write_text("from tests.conftest import pytest_xdist_make_scheduler\n")
    for path in MODULES:
        f = root / path
        f.parent.mkdir(parents=True, exist_ok=True)
        tests = "".join(f"\ndef test_{i}():\n    _note('test_{i}')\n" for i in range(4))
        f.write_text(BODY + tests)


def test_groups_stay_in_one_worker_and_process_groups_go_first(tmp_path: Path) -> None:
    root, out = tmp_path / "tree", tmp_path / "out"
    out.mkdir()
    root.mkdir()
    _tree(root)
    env = {**os.environ, "PYTHONPATH": str(REPO), "GROUPS_OUT": str(out)}
    argv = [sys.executable, "-m", "pytest", "-q", "-n", "2", "-p", "no:cacheprovider"]
    argv += ["-p", "no:randomly", "-p", "no:hypothesispytest", str(root)]
    r = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [json.loads(p.read_text()) for p in out.iterdir()]
    assert len(rows) == 4 * len(MODULES)  # every test ran, once
    by_module: dict[str, set[str]] = defaultdict(set)
    for row in rows:
        by_module[row["module"]].add(row["worker"])
    assert all(len(w) == 1 for w in by_module.values()), by_module
    workers = {m: next(iter(w)) for m, w in by_module.items()}
    assert workers["tests/clients/test_c1.py"] == workers["tests/clients/test_c2.py"]
    assert workers["tests/e2e/test_wire.py"] == workers["tests/e2e/test_open_proxy.py"]
    # each worker's first test is from a group that starts processes, not a unit module
    for worker in {row["worker"] for row in rows}:
        first = min((row for row in rows if row["worker"] == worker), key=lambda r: r["at"])
        assert MODULES[first["module"]] != "unit", first


def test_the_groups() -> None:
    assert group_of("tests/clients/test_forks.py::test_x") == "tests/clients"
    assert group_of("tests/e2e/test_websocket_e2e.py::test_x[lean]") == "contract"
    assert group_of("tests/e2e/test_drain_e2e.py::test_x") == "tests/e2e/test_drain_e2e.py"
    assert group_of("tests/common/test_config.py::test_x") == "tests/common/test_config.py"
