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
    tmp: Any, names: tuple[str, ...], *, top: dict[str, Any] | None = None, **proxy: Any
) -> Stack:
    stack = Stack(tmp)
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


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = build_stack(tmp_path_factory.mktemp("stack"), ("alpha", "beta", "archive-gamma"))
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def _clean_faults(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "stack" in request.fixturenames:
        s: Stack = request.getfixturevalue("stack")
        for node in s.nodes:
            if node.proc.alive():
                node.reset()
