"""Fixtures that start real processes on 127.0.0.1 (see harness.py)."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from tests.e2e.harness import Stack, base_config

pytestmark = pytest.mark.e2e

_client_ips = (f"127.0.{a}.{b}" for a, b in itertools.product(range(10, 250), range(2, 250)))


def next_client_ip() -> str:
    """A fresh loopback source address: its own rate-limit identity."""
    return next(_client_ips)


@dataclass
class Reply:
    status: int
    headers: Any
    body: Any
    raw: bytes


async def post(
    url: str,
    body: Any,
    *,
    client_ip: str | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 20.0,
) -> Reply:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    connector = aiohttp.TCPConnector(local_addr=(client_ip or next_client_ip(), 0))
    async with aiohttp.ClientSession(connector=connector) as s:
        async with s.post(
            url,
            data=data,
            headers={"Content-Type": "application/json", **(headers or {})},
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as r:
            raw = await r.read()
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None
            return Reply(r.status, r.headers, parsed, raw)


def call(method: str, params: Any = None, id_: Any = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": id_,
        "method": method,
        "params": [] if params is None else params,
    }


PROXY_DEFAULTS = {
    "failover": {
        "max_attempts": 3,
        "attempt_timeout_s": 1,
        "deadline_s": 2.5,
        "eject_after": 3,
        "eject_cooldown_s": 1,
    },
}


def build_stack(
    tmp: Any,
    names: tuple[str, ...],
    *,
    top: dict[str, Any] | None = None,
    sets: tuple[str, ...] = (),
    **proxy: Any,
) -> Stack:
    """Nodes ``names``, the sidecar and the proxy; ``sets``: mitmdump options."""
    stack = Stack(tmp, proxy_sets=sets)
    epoch = time.time() - 600
    try:
        for name in names:
            stack.start_node(name, epoch=epoch, archive=name.startswith("archive"))
        stack.write_config(base_config(tmp, stack.nodes, top=top, **{**PROXY_DEFAULTS, **proxy}))
        stack.start_sidecar()
        stack.start_proxy()
    except BaseException:
        stack.stop()
        raise
    return stack


# The ways an operator can run the addon's event dispatch: the default (fast
# dispatch), lean mode, and mitmproxy's own dispatch. Contract tests run under each.
DISPATCH_MODES: dict[str, tuple[str, ...]] = {
    "default": (),
    # info logging on, for the test that lean mode really unloaded the built-ins
    "lean": ("chainproxy_lean=true", "termlog_verbosity=info"),
    "mitmproxy-dispatch": ("chainproxy_fast_dispatch=false",),
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = build_stack(tmp_path_factory.mktemp("stack"), ("alpha", "beta", "archive-gamma"))
    yield s
    s.stop()


@pytest.fixture(scope="module", params=list(DISPATCH_MODES))
def mode_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    """Like ``stack``, once per dispatch mode."""
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
