"""Fixtures for real clients against a real Substrate runtime (chopsticks), offline.

Every test here is marked ``clients`` (and ``e2e``): ``make test-clients`` or
``pytest -m clients`` runs them alone; ``make test`` runs them with the rest.
Without node/npm they are skipped with the reason; the npm packages are
installed on first use (``npm ci --ignore-scripts``, like ``make js-deps``).
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.clients.chopsticks_stack import ChainStack, start_chain_stack
from tests.clients.js_deps import JS_DIR, ensure_js_deps, extract_genesis, js_unavailable

HERE = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "clients: real clients (substrate-interface, polkadot.js) over chopsticks"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The chopsticks set-ups are shared fixtures (the session's chain, a module's
    # own): each lands in whichever test happens to come first, and on a loaded
    # machine a start-up alone took 90 of the 120 s a test is given. So a test's
    # timeout covers the test itself; a set-up is bounded by its own waits, each
    # on a condition (chopsticks answering, a child alive) with a hang guard.
    timeout = config.getoption("timeout", None) or config.getini("timeout")
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.clients)
            item.add_marker(pytest.mark.e2e)
            if timeout and item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(float(timeout), func_only=True))


@pytest.fixture(scope="session")
def js() -> Path:
    """node, npm and tests/clients/js/node_modules, or a skip that says why."""
    if (why := js_unavailable()) is not None:
        pytest.skip(why)
    ensure_js_deps()
    return JS_DIR


@pytest.fixture(scope="session")
def genesis(js: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Rococo Asset Hub's raw genesis, extracted from the npm package (not committed)."""
    return extract_genesis(tmp_path_factory.mktemp("genesis") / "asset-hub-rococo.json")


@pytest.fixture(scope="session")
def chain(genesis: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChainStack]:
    """One chopsticks chain behind two endpoints, the sidecar and mitmdump."""
    stack = start_chain_stack(tmp_path_factory.mktemp("chain"), genesis)
    yield stack
    stack.stop()


@pytest.fixture
def both_endpoints(chain: ChainStack) -> Iterator[ChainStack]:
    """The chain with both endpoints up and synced and the proxy using the fast one,
    before and after the test. After a test stopped an endpoint, mitmdump is
    restarted too: the next test starts from a proxy with no memory of failures
    (a failed upstream's latency penalty takes ~30 s to fade)."""
    _restore(chain)
    yield chain
    _restore(chain)


def _restore(chain: ChainStack) -> None:
    stopped = [front for front in chain.fronts if not front.alive()]
    for front in stopped:
        front.start()
    if stopped:
        chain.restart_proxy()
    chain.wait_all_synced()
    chain.prefer_fast()


# --- running the polkadot.js script -------------------------------------------------------


class NodeSession:
    """``node <script> <scenario> <url> <ip>`` (``polkadot_session.mjs`` unless said
    otherwise): its "@@ {json}" lines (read by a thread into a queue, so a wait can
    time out)."""

    def __init__(
        self, scenario: str, url: str, source_ip: str, script: str = "polkadot_session.mjs"
    ) -> None:
        self.scenario = scenario
        self.proc = subprocess.Popen(
            ["node", str(JS_DIR / script), scenario, url, source_ip],
            cwd=JS_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []  # everything it printed, for failure messages
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)  # end of output

    def next_step(self, timeout: float = 60.0) -> dict[str, Any]:
        """The next result line; fails the test on an error step, exit or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self.kill()
                pytest.fail(f"polkadot.js {self.scenario}: no answer in {timeout}s:\n{self.log}")
            if line is None:
                self.proc.wait(5)
                pytest.fail(f"polkadot.js {self.scenario} exited:\n{self.log}")
            self.lines.append(line)
            if line.startswith("@@ "):
                step = json.loads(line[3:])
                if step["step"] == "error":
                    pytest.fail(
                        f"polkadot.js {self.scenario} failed: {step['message']}\n{self.log}"
                    )
                return step

    def steps(self, timeout: float = 90.0) -> dict[str, dict[str, Any]]:
        """All remaining steps up to "done", by name."""
        out: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + timeout
        while (step := self.next_step(max(1.0, deadline - time.monotonic())))["step"] != "done":
            out[step["step"]] = step
        assert self.proc.wait(10) == 0, self.log
        return out

    def send_line(self, text: str = "go") -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    @property
    def log(self) -> str:
        return "\n".join(self.lines)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


@pytest.fixture
def polkadot_js(js: Path) -> Iterator[Any]:
    """Start the polkadot.js script; every session is killed at the end of the test."""
    sessions: list[NodeSession] = []

    def start(
        scenario: str, url: str, source_ip: str, script: str = "polkadot_session.mjs"
    ) -> NodeSession:
        s = NodeSession(scenario, url, source_ip, script)
        sessions.append(s)
        return s

    yield start
    for s in sessions:
        s.kill()
