"""Cross-checked nodes through real processes: one of three simulated nodes
answers a quarter of the storage keys wrongly; with every finalized answer
checked, it is quarantined within the first few samples (no client calls to
it any more, an answer-mismatch incident on the sidecar), while two honest
nodes are never quarantined over a thousand checked calls (the 10,000 of
the issue are in tests/addon/upstream/test_cross_check.py, with fake nodes)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from common.endpoint_id import endpoint_id
from tests.e2e.harness import Stack, base_config
from tests.e2e.helpers import PROXY_DEFAULTS, call, next_client_ip, post

pytestmark = pytest.mark.e2e

NO_QUOTA = {"rate_limit": {"requests": 1_000_000, "window_s": 60}}
PROBES = {"probe": {"interval_s": 2, "head_interval_s": 1, "timeout_s": 1}}


def _stack(tmp: Any, names: tuple[str, ...]) -> Stack:
    s = Stack(tmp)
    epoch = time.time() - 600
    for name in names:
        s.start_node(name, epoch=epoch)
    config = base_config(
        tmp,
        s.nodes,
        top=PROBES,
        **{**PROXY_DEFAULTS, **NO_QUOTA, "cross_check": {"sample_rate": 1.0}},
    )
    s.write_config(config)
    s.start_sidecar()
    s.start_proxy()
    return s


@pytest.fixture
def three(tmp_path: Any) -> Iterator[Stack]:
    s = _stack(tmp_path, ("alpha", "beta", "gamma"))
    try:
        yield s
    finally:
        s.stop()


async def _finalized(stack: Stack) -> str:
    """A finalized block's hash, its height made known to the proxy (the index)."""
    ip = next_client_ip()
    block = stack.nodes[0].rpc("chain_getFinalizedHead")["result"]
    r = await post(stack.rpc_url(), call("chain_getHeader", [block]), client_ip=ip)
    assert r.status == 200 and r.body["result"] is not None
    await asyncio.sleep(2.5)  # the probes' finalized height reaches the proxy's snapshot
    return block


async def _reads(stack: Stack, block: str, start: int, n: int, concurrency: int = 8) -> None:
    ips = [next_client_ip() for _ in range(concurrency)]
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with gate:
            key = f"0x26{i:062x}"  # not 0x00...: the simulator answers those as absent
            r = await post(
                stack.rpc_url(),
                call("state_getStorage", [key, block]),
                client_ip=ips[i % concurrency],
            )
            assert r.status == 200, r.body

    await asyncio.gather(*(one(i) for i in range(start, start + n)))


async def _text(url: str) -> str:
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        return await r.text()


async def test_a_node_that_answers_wrongly_is_quarantined(three: Stack) -> None:
    stack = three
    gamma = stack.nodes[2]
    gamma.control(wrong_storage=True)
    block = await _finalized(stack)
    await _reads(stack, block, 0, 60)  # a few dozen samples
    await asyncio.sleep(1.0)  # the checks run after the answers
    before = gamma.state()["calls"].get("state_getStorage", 0)
    await _reads(stack, block, 1000, 60)
    await asyncio.sleep(1.0)
    after = gamma.state()["calls"].get("state_getStorage", 0)
    # quarantined: no client call; at most one re-ask of the call it got wrong
    assert after - before <= 1, (before, after)
    gid = endpoint_id(gamma.url)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # the next usage batch, then the sidecar's reconcile
        incidents = await _text(f"{stack.sidecar_url}/api/v1/incidents")
        if gid in incidents and "answer-mismatch" in incidents:
            break
        await asyncio.sleep(1)
    else:
        raise AssertionError("no answer-mismatch incident for the quarantined node")
    metrics = await _text(f"{stack.sidecar_url}/metrics")
    assert 'chainproxy_cross_checks_total{network="finney",outcome="quarantined"} 1' in metrics


async def test_honest_nodes_are_never_quarantined(tmp_path: Any) -> None:
    stack = _stack(tmp_path, ("alpha", "beta", "gamma"))
    try:
        block = await _finalized(stack)
        await _reads(stack, block, 0, 1000, concurrency=16)
        await asyncio.sleep(5)  # the last checks, and a usage batch with their counts
        metrics = await _text(f"{stack.sidecar_url}/metrics")
        assert 'outcome="agree"' in metrics
        assert 'outcome="quarantined"' not in metrics and 'outcome="mismatch"' not in metrics
    finally:
        stack.stop()
