"""A liar caught at a finalized block hash the client brought, through real
processes: the client takes the hash from a node directly (as SDKs and
explorers do, from a cache or a link), never through chainproxy, and reads
storage at it. chainproxy looks the hash's finality up itself, so the reads
are cross-checked (before: never, for a hash it had not learned), the node
answering wrongly is quarantined, and every cache entry it had filled leaves
the cache: its answers are read again from the honest nodes.

Three simulated nodes; ``gamma`` answers honestly at first (so entries it
filled are certainly in the cache), then a quarter of the storage keys
wrongly (``wrong_storage``); half the answers are checked
(``sample_rate: 0.5``, the rate the issue measured at)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from addon.chain.finality import FINAL
from addon.reporting.live_metrics import CACHE_PURGED, CROSS_CHECKS, FINALITY_LOOKUPS
from common.endpoint_id import endpoint_id
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

CONFIG = {
    **PROXY_DEFAULTS,
    "rate_limit": {"requests": 1_000_000, "window_s": 60},
    "cross_check": {"sample_rate": 0.5},
}
PROBES = {"probe": {"interval_s": 2, "head_interval_s": 1, "timeout_s": 1}}


@pytest.fixture
def three(tmp_path: Any) -> Iterator[Stack]:
    s = Stack(tmp_path)
    try:
        epoch = time.time() - 600
        for name in ("alpha", "beta", "gamma"):
            s.start_node(name, epoch=epoch)
        s.write_config(base_config(tmp_path, s.nodes, top=PROBES, **CONFIG))
        s.start_sidecar()
        s.start_proxy()
        yield s
    finally:
        s.stop()


def _metric(stack: Stack, name: str, **labels: str) -> float:
    """A counter the sidecar has from the proxy's usage batches."""
    return metric_value(metrics_text(stack.sidecar_url), name, network="finney", **labels)


class Reads:
    """Storage reads at one block through chainproxy, by key: the value, who
    answered it (empty: the cache), whether it was a cache hit."""

    def __init__(self, stack: Stack, block: str) -> None:
        self.stack, self.block = stack, block
        self.next_key = 0x1000

    async def one(self, key: str) -> tuple[str, str, str]:
        r = await post(
            self.stack.rpc_url(),
            call("state_getStorage", [key, self.block]),
            client_ip=next_client_ip(),
        )
        assert r.status == 200 and "result" in r.body, r.body
        return r.body["result"], r.headers.get("X-Chainproxy-Upstream", ""), r.headers["X-Cache"]

    async def fresh(self, n: int = 8) -> dict[str, tuple[str, str, str]]:
        """``n`` keys never read before, at once."""
        keys = [f"0x26{k:062x}" for k in range(self.next_key, self.next_key + n)]
        self.next_key += n
        return dict(zip(keys, await asyncio.gather(*(self.one(k) for k in keys)), strict=True))


async def test_a_liar_at_a_hash_the_client_brought_is_caught_and_its_entries_leave(
    three: Stack,
) -> None:
    stack = three
    alpha, gamma = stack.nodes[0], stack.nodes[2]
    gid = endpoint_id(gamma.url)
    # the client's hash: a finalized block, asked of a node directly
    block = alpha.rpc("chain_getFinalizedHead")["result"]
    height = int(alpha.rpc("chain_getHeader", [block])["result"]["number"], 16)
    await wait_until(
        lambda: (sidecar_routes(stack)["finalized"] or 0) >= height,
        15,
        "the probes' finalized height reaches the block",
        step=0.2,
    )
    reads = Reads(stack, block)
    seen: dict[str, tuple[str, str, str]] = {}

    async def gamma_filled() -> bool:  # gamma honest yet: entries it filled, certainly
        seen.update(await reads.fresh())
        return sum(up == gid for _, up, _ in seen.values()) >= 3

    await wait_until(gamma_filled, 10, "gamma answers a few reads", step=0)
    honest_while = sum(up == gid for _, up, _ in seen.values())  # its entries, all cached
    gamma.control(wrong_storage=True)

    async def caught() -> bool:
        seen.update(await reads.fresh())
        return _metric(stack, CROSS_CHECKS, outcome="quarantined") >= 1

    await wait_until(caught, 20, "gamma is quarantined", step=0.2)
    # the hash was looked up (it was never asked through chainproxy)
    assert _metric(stack, FINALITY_LOOKUPS, outcome=FINAL) >= 1
    by_gamma = sorted(k for k, (_, up, _) in seen.items() if up == gid)
    # (at least those it filled while honest: a wrong answer sampled is dropped
    # by its own check, one in flight as it was caught is never stored)
    await wait_until(
        lambda: _metric(stack, CACHE_PURGED, tier="local") >= honest_while,
        10,
        "gamma's cache entries are counted purged",
        step=0.2,
    )
    right = {k: alpha.rpc("state_getStorage", [k, block])["result"] for k in seen}
    wrong = sorted(k for k, (v, _, _) in seen.items() if v != right[k])
    assert set(wrong) <= set(by_gamma)  # (gamma's answers before it was caught)
    again = {k: await reads.one(k) for k in seen}
    assert {k for k, (v, _, _) in again.items() if v != right[k]} == set(), wrong
    # every entry gamma filled left the cache: read again from an honest node ...
    assert all(again[k][2] == "MISS" and again[k][1] not in ("", gid) for k in by_gamma)
    # ... and the honest nodes' entries stayed
    assert all(hit == "HIT" for k, (_, _, hit) in again.items() if k not in by_gamma)
