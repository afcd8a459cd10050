"""Fixtures that start real processes on 127.0.0.1 (see harness.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.harness import Stack
from tests.e2e.helpers import build_stack

pytestmark = pytest.mark.e2e

# The ways an operator can run the addon's event dispatch: the default (fast
# dispatch), lean mode, and mitmproxy's own dispatch. Contract tests run under each.
DISPATCH_MODES: dict[str, tuple[str, ...]] = {
    "default": (),
    # info logging on, for the test that lean mode really unloaded the built-ins
    "lean": ("chainproxy_lean=true", "termlog_verbosity=info"),
    # mitmproxy's own ways: its event dispatch, every WebSocket message through
    # its WebSocket layer both ways (no direct reads nor writes), every HTTP
    # request through its HTTP layer (no direct reads)
    "mitmproxy-dispatch": (
        "chainproxy_fast_dispatch=false",
        "chainproxy_ws_direct=false",
        "chainproxy_http_direct=false",
    ),
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = build_stack(tmp_path_factory.mktemp("stack"), ("alpha", "beta", "archive-gamma"))
    yield s
    s.stop()


@pytest.fixture(scope="session", params=list(DISPATCH_MODES))
def mode_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """Like ``stack``, once per dispatch mode, and shared by the modules of the
    contract tests (test_wire, test_open_proxy, test_websocket_e2e): their
    tests only call and read (a node's faults are reset after each test,
    ``_clean_faults``; quotas are per client address, each test's its own), so
    one stack per mode serves them all, each started once rather than once
    per module."""
    s = build_stack(
        tmp_path_factory.mktemp(f"stack-{request.param}"),
        ("alpha", "beta", "archive-gamma"),
        sets=DISPATCH_MODES[request.param],
    )
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def _clean_faults(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    for name in ("stack", "mode_stack"):
        if name not in request.fixturenames:
            continue
        s: Stack = request.getfixturevalue(name)
        for node in s.nodes:
            if node.proc.alive():
                node.reset()
        break
