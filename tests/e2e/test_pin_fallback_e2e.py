"""Head pinning never fails a call, through real processes: a read the
client sent without a block hash, pinned by the proxy to a head no node can
serve, is sent again as the client sent it, within the same call, and
answered. Three ways to get there: a reorg right after the head was learned,
a head announced by a node that then dies while the other lags a block, and
a node that has not imported the head yet."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from simnode.remote import http_json
from tests.e2e.harness import Stack, base_config
from tests.e2e.helpers import PROXY_DEFAULTS, Reply, call, next_client_ip, post

pytestmark = pytest.mark.e2e

BLOCK_S = 3.0
# probes once a minute: what the proxy knows of each node's height stays the
# start's, as between two probes of a real deployment (a generous timeout; a
# first probe that fails anyway is tried again within a second or two)
STALE_PROBES = {"probe": {"interval_s": 60, "head_interval_s": 60, "timeout_s": 5}}
_keys = iter(range(1, 10**9))


@pytest.fixture
def pinning(tmp_path: Any) -> Iterator[Stack]:
    """Two nodes the proxy knows to be level: the sidecar's first probes saw
    both at one height (the proxy's view until the next probes, a minute
    later). Probed while their blocks come, the two may be seen a block apart
    (a block between the two probes: 5 starts in 45), and that lasts the
    minute; so the nodes hold their head until both were probed."""
    s = Stack(tmp_path)
    try:
        epoch = time.time() - 600
        s.start_nodes(("alpha", "beta"), epoch=epoch, block_time=BLOCK_S)
        s.write_config(base_config(tmp_path, s.nodes, top=STALE_PROBES, **PROXY_DEFAULTS))
        _hold_level(s.nodes)
        s.start_sidecar()
        _probed_level(s)
        for node in s.nodes:
            node.control(freeze=False)  # blocks come again, from the clock's height
        s.start_proxy()  # its first routing snapshot already has both heights
        yield s
    finally:
        s.stop()


def _hold_level(nodes: list[Any]) -> None:
    """Both nodes' heads held (``freeze``) at one height."""
    for _ in range(10):
        for node in nodes:
            node.control(freeze=True)
        if len({_best(node) for node in nodes}) == 1:
            return
        for node in nodes:  # a block came between the two: again
            node.control(freeze=False)
    raise AssertionError("the nodes never held one height")


def _probed_level(stack: Stack) -> None:
    """Until the sidecar's first probes have seen both nodes (at one height)."""
    url = f"{stack.sidecar_url}/api/v1/internal/routes/finney"
    ups: list[Any] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            ups = http_json(url, timeout=2)["upstreams"]
            bests = {u.get("best") for u in ups}
            if len(ups) == 2 and None not in bests:
                assert len(bests) == 1, ups
                return
        time.sleep(0.1)
    raise AssertionError(f"the probes never saw both nodes: {ups}")


def _best(node: Any) -> int:
    return int(node.rpc("chain_getHeader")["result"]["number"], 16)


async def _next_block(node: Any, after: int) -> int:
    for _ in range(int(BLOCK_S * 20)):
        n = _best(node)
        if n > after:
            return n
        await asyncio.sleep(0.05)
    raise AssertionError("no new block")


async def _learn(stack: Stack, block_hash: str, ip: str) -> None:
    """The proxy learns the head from a header that passes through it."""
    r = await post(stack.rpc_url(), call("chain_getHeader", [block_hash]), client_ip=ip)
    assert r.status == 200 and r.body["result"] is not None, r.body


async def _read(stack: Stack, ip: str) -> Reply:
    key = f"0x{next(_keys):064x}"  # a key never read: no cache hit
    return await post(stack.rpc_url(), call("state_getStorage", [key]), client_ip=ip)


def _answered_unpinned(r: Reply) -> None:
    assert r.status == 200 and "result" in r.body, r.body
    assert r.headers["X-Chainproxy-Pinned"] == "missed"


async def test_a_reorg_right_after_the_head_was_learned(pinning: Stack) -> None:
    alpha, beta = pinning.nodes
    ip = next_client_ip()
    alpha.control(fork=True)  # alpha's next blocks are a minority fork's
    n = await _next_block(alpha, _best(alpha))
    forked = alpha.rpc("chain_getBlockHash", [n])["result"]
    assert forked != beta.rpc("chain_getBlockHash", [n])["result"]
    await _learn(pinning, forked, ip)
    alpha.control(fork=False)  # the reorg: no node knows that block now
    calls_before = sum(nd.state()["calls"].get("state_getStorage", 0) for nd in pinning.nodes)
    r = await _read(pinning, ip)
    _answered_unpinned(r)
    assert int(r.headers["X-Chainproxy-Attempts"]) <= 2  # unpinned would take 1: 1 more at most
    calls_after = sum(nd.state()["calls"].get("state_getStorage", 0) for nd in pinning.nodes)
    assert calls_after - calls_before <= 2
    again = await _read(pinning, ip)  # not pinned to that block again
    assert again.status == 200 and again.headers.get("X-Chainproxy-Pinned") != forked


async def test_a_head_from_a_node_that_dies_while_the_other_lags(pinning: Stack) -> None:
    alpha, beta = pinning.nodes
    ip = next_client_ip()
    beta.control(lag=1)  # beta is a block behind
    n = await _next_block(alpha, _best(alpha))
    head = alpha.rpc("chain_getBlockHash", [n])["result"]
    await _learn(pinning, head, ip)  # beta answers null for it; alpha has it
    alpha.proc.stop(signal.SIGKILL)
    r = await _read(pinning, ip)
    _answered_unpinned(r)
    # alpha's refused connection (as without pinning), beta's unknown block, beta
    assert int(r.headers["X-Chainproxy-Attempts"]) <= 3


async def test_a_node_that_has_not_imported_the_head_yet(pinning: Stack) -> None:
    alpha, beta = pinning.nodes
    ip = next_client_ip()
    beta.control(lag=1)  # set after the probes: the proxy thinks beta is level
    alpha.control(latency_ms=150)  # and prefers beta, the faster
    n = await _next_block(alpha, _best(alpha))
    head = alpha.rpc("chain_getBlockHash", [n])["result"]
    await _learn(pinning, head, ip)
    missed = 0
    for _ in range(12):  # a read that reaches beta first meets the unknown head
        r = await _read(pinning, ip)
        assert r.status == 200 and "result" in r.body, r.body
        if r.headers.get("X-Chainproxy-Pinned") == "missed":
            missed += 1
            assert int(r.headers["X-Chainproxy-Attempts"]) <= 2
            break
    assert missed == 1
