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

from addon.reporting.live_metrics import CROSS_CHECKS as CHECKS
from addon.upstream.cross_check import READMIT_EVERY_S
from common.endpoint_id import endpoint_id
from sidecar.probing.horizon import STATE_CHECKS
from tests.e2e.harness import Stack, base_config
from tests.e2e.helpers import (
    PROXY_DEFAULTS,
    call,
    metric_value,
    metrics_text,
    next_client_ip,
    post,
    sidecar_routes,
    wait_until,
)

pytestmark = pytest.mark.e2e

NO_QUOTA = {"rate_limit": {"requests": 1_000_000, "window_s": 60}}
PROBES = {"probe": {"interval_s": 2, "head_interval_s": 1, "timeout_s": 1}}


def _stack(tmp: Any, names: tuple[str, ...]) -> Stack:
    s = Stack(tmp)
    epoch = time.time() - 600
    s.start_nodes(names, epoch=epoch)
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
    """A finalized block's hash, its height made known to the proxy (the index)
    and its finality to the sidecar (the addon's snapshot follows within its
    refresh: ``_checked`` waits for that by the checks themselves)."""
    ip = next_client_ip()
    block = stack.nodes[0].rpc("chain_getFinalizedHead")["result"]
    r = await post(stack.rpc_url(), call("chain_getHeader", [block]), client_ip=ip)
    assert r.status == 200 and r.body["result"] is not None
    height = int(r.body["result"]["number"], 16)
    await wait_until(
        lambda: (sidecar_routes(stack)["finalized"] or 0) >= height,
        20,
        "the probes' finalized height reaches the sidecar's snapshot",
        step=0.2,
    )
    return block


OUTCOMES = ("agree", "mismatch", "skipped")  # every sampled answer counts one of these


def _checks(stack: Stack, outcome: str | None = None) -> float:
    """The cross-checks the sidecar has counted (from the proxy's usage batches)."""
    text = metrics_text(stack.sidecar_url)
    outcomes = (outcome,) if outcome else OUTCOMES
    return sum(metric_value(text, CHECKS, network="finney", outcome=o) for o in outcomes)


async def _checked(stack: Stack, block: str, until: Any, what: str, timeout: float = 40) -> int:
    """Reads at ``block`` a few at a time until ``until()`` holds (the addon's
    snapshot has the block final, so its answers are checked); the next key."""
    key = 10_000

    async def more() -> bool:
        nonlocal key
        await _reads(stack, block, key, 8)
        key += 8
        return bool(until())

    await wait_until(more, timeout, what, step=0.3)
    return key


async def _reads(stack: Stack, block: str, start: int, n: int, concurrency: int = 8) -> list[str]:
    """``n`` reads of distinct keys at ``block``; the upstream that answered each."""
    ips = [next_client_ip() for _ in range(concurrency)]
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> str:
        async with gate:
            key = f"0x26{i:062x}"  # not 0x00...: the simulator answers those as absent
            r = await post(
                stack.rpc_url(),
                call("state_getStorage", [key, block]),
                client_ip=ips[i % concurrency],
            )
            assert r.status == 200, r.body
            return r.headers.get("X-Chainproxy-Upstream", "")  # type: ignore[no-any-return]

    return await asyncio.gather(*(one(i) for i in range(start, start + n)))


async def _text(url: str) -> str:
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        return await r.text()


async def test_a_node_that_answers_wrongly_is_quarantined(three: Stack) -> None:
    stack = three
    gamma = stack.nodes[2]
    gamma.control(wrong_storage=True)
    block = await _finalized(stack)
    # a few dozen samples, until the proxy counted the quarantine
    await _checked(
        stack,
        block,
        lambda: _checks(stack, "quarantined") >= 1,
        "gamma is quarantined",
    )
    checks = _checks(stack)
    gid = endpoint_id(gamma.url)
    before = gamma.state()["calls"].get("state_getStorage", 0)
    started = time.monotonic()
    answered_by = await _reads(stack, block, 1000, 60)
    # the checks run after the answers: until the sidecar counted them all
    await wait_until(
        lambda: _checks(stack) >= checks + 60, 20, "the 60 reads' checks are counted", step=0.3
    )
    after = gamma.state()["calls"].get("state_getStorage", 0)
    took = time.monotonic() - started
    # quarantined: no client call (a wrong answer is still an answer: it would be
    # gamma's) ...
    assert gid not in answered_by, answered_by
    # ... and no check asks it; at most one re-ask of the call it got wrong per
    # READMIT_EVERY_S, and the sidecar's probes besides: each full probe (every
    # PROBES interval_s) reads the state at block 1 (archive) and at the blocks
    # of its state checks (STATE_CHECKS, the node's horizon)
    re_asks = 1 + int(took // READMIT_EVERY_S)
    probes = (1 + STATE_CHECKS) * (1 + int(took // PROBES["probe"]["interval_s"]))
    assert after - before <= re_asks + probes, (before, after, re_asks, probes)

    async def incident() -> bool:  # the next usage batch, then the sidecar's reconcile
        incidents = await _text(f"{stack.sidecar_url}/api/v1/incidents")
        return gid in incidents and "answer-mismatch" in incidents

    await wait_until(incident, 20, "an answer-mismatch incident for the quarantined node")
    assert _checks(stack, "quarantined") == 1


async def test_honest_nodes_are_never_quarantined(tmp_path: Any) -> None:
    stack = _stack(tmp_path, ("alpha", "beta", "gamma"))
    try:
        block = await _finalized(stack)
        # until the addon's answers at the block are checked (its snapshot has it final)
        key = await _checked(stack, block, lambda: _checks(stack) >= 1, "a first check")
        checks = _checks(stack)
        await _reads(stack, block, key, 1000, concurrency=16)
        # every one of the 1000 answers is checked (or skipped past 8 checks at once):
        # until the sidecar has counted them all, then a mismatch would show
        await wait_until(
            lambda: _checks(stack) >= checks + 1000,
            30,
            "the 1000 reads' checks are counted",
            step=0.3,
        )
        metrics = await _text(f"{stack.sidecar_url}/metrics")
        assert 'outcome="agree"' in metrics
        assert 'outcome="quarantined"' not in metrics and 'outcome="mismatch"' not in metrics
    finally:
        stack.stop()
