"""Node.js, npm and the npm packages of the real-client tests (chopsticks,
polkadot.js) in tests/clients/js: whether they can run here, and installing
them the way ``make js-deps`` does."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.e2e.harness import REPO

JS_DIR = REPO / "tests" / "clients" / "js"
NODE_MODULES = JS_DIR / "node_modules"
# Written after a successful `npm ci`; shared with the Makefile's js-deps target.
JS_STAMP = NODE_MODULES / ".chainproxy-installed"
CHOPSTICKS_CLI = NODE_MODULES / "@acala-network" / "chopsticks" / "chopsticks.cjs"


def js_unavailable() -> str | None:
    """Why the JS side cannot run here, or None."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed: the real-client tests need Node.js 20+ and npm"
    return None


def js_deps_current() -> bool:
    lock = JS_DIR / "package-lock.json"
    return (
        JS_STAMP.exists()
        and CHOPSTICKS_CLI.exists()
        and JS_STAMP.stat().st_mtime >= lock.stat().st_mtime
    )


def ensure_js_deps(timeout_s: float = 600.0) -> None:
    """``npm ci --ignore-scripts`` in tests/clients/js unless already current (the same
    command and stamp as ``make js-deps``). chopsticks' sqlite3 native build is not
    needed: no ``--db``."""
    if js_deps_current():
        return
    if NODE_MODULES.is_symlink():
        # `npm ci` empties node_modules first: through a link, another checkout's
        raise RuntimeError(
            f"{NODE_MODULES} is a symbolic link and its packages look out of date"
            " (an older stamp than package-lock.json): not running `npm ci` through it;"
            " run `make js-deps` in the checkout it points into"
        )
    done = subprocess.run(
        ["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
        cwd=JS_DIR,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"npm ci failed in {JS_DIR}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
    JS_STAMP.touch()


def extract_genesis(dest: Path) -> Path:
    subprocess.run(
        ["node", str(JS_DIR / "extract_genesis.mjs"), str(dest)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return dest
