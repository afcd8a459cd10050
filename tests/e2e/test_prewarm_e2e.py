"""Pre-warm, through real processes: five clients read the same runtime API at
each block, as a validator fleet does after each head notification; from the
third block on the proxy fetches it as soon as it sees the block, so the
first client's read is a cache hit or joins the call already in flight, and
the nodes see one call per block for it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from addon.reporting.live_metrics import PREWARM
from tests.e2e.harness import Stack, base_config
from tests.e2e.helpers import (
    PROXY_DEFAULTS,
    Client,
    Reply,
    call,
    metric_value,
    metrics_text,
    next_client_ip,
    post,
    wait_until,
    with_wss,
)

pytestmark = pytest.mark.e2e

READ = ["SubnetInfoRuntimeApi_get_all_dynamic_info", "0x"]  # ~192 KiB on the simulator


@pytest.fixture
def prewarm_stack(tmp_path: Any) -> Iterator[Stack]:
    s = Stack(tmp_path)
    try:
        epoch = time.time() - 600
        s.start_nodes(("alpha", "beta"), epoch=epoch, block_time=3.0)
        s.write_config(with_wss(base_config(tmp_path, s.nodes, **PROXY_DEFAULTS)))
        s.start_sidecar()
        s.start_proxy()
        yield s
    finally:
        s.stop()


def _state_calls(stack: Stack) -> int:
    return sum(n.state()["calls"].get("state_call", 0) for n in stack.nodes)


async def test_the_first_client_after_a_block_finds_it_warm(prewarm_stack: Stack) -> None:
    stack = prewarm_stack
    ips = [next_client_ip() for _ in range(5)]
    ws = stack.rpc_url().replace("http://", "ws://")
    rounds: list[tuple[list[Reply], int]] = []
    async with aiohttp.ClientSession() as s, s.ws_connect(ws) as sock:
        heads = Client(sock)
        sid = (await heads.ask("chain_subscribeNewHeads"))["result"]
        seen = len(await heads.wait_notes(sid, 1))
        for _ in range(5):  # five blocks: two to learn the demand, three warm
            await heads.wait_notes(sid, seen + 1, timeout=15)
            seen = len(heads.notes[sid])
            before = _state_calls(stack)
            replies = []
            for ip in ips:  # one after the other: the first is the one that matters
                replies.append(await post(stack.rpc_url(), call("state_call", READ), client_ip=ip))
            rounds.append((replies, _state_calls(stack) - before))
    for replies, _ in rounds:
        assert all(r.status == 200 and "result" in r.body for r in replies)
    for replies, upstream in rounds[2:]:
        first = replies[0]
        warm = first.headers["X-Cache"] == "HIT" or first.headers.get("X-Chainproxy-Coalesced")
        assert warm, dict(first.headers)
        assert upstream <= 1  # the pre-warm's call, and nobody else's
    # the proxy's next usage batch carries its counters to the sidecar's /metrics
    await wait_until(lambda: _fetched(stack) >= 1, 20, "the pre-warm's fetches are counted")


def _fetched(stack: Stack) -> float:
    text = metrics_text(stack.proxy_url)  # the sidecar's, through the proxy
    return metric_value(text, PREWARM, network="finney", outcome="fetched")
