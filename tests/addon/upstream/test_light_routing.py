"""Light calls go, within the best tier, to nodes with no heavy read in
flight; a heavy read's end (answered, failed or abandoned) frees its node;
the forward counts its heavy attempts at the node it chose."""

from __future__ import annotations

import asyncio
from collections import Counter

from addon.rpc.jsonrpc import Call
from addon.upstream.forward import Budget, forward
from addon.upstream.pool import TIER_LAGGING, TIER_SYNCED
from tests.addon.upstream.test_pool import pool, up


def test_a_light_call_avoids_a_node_with_a_heavy_read_in_flight() -> None:
    p, _ = pool(up("a"), up("b"), up("c"))
    p.started(p.upstreams["a"], heavy=True)
    chosen = Counter(p.choose(set(), light=True).id for _ in range(300))  # type: ignore[union-attr]
    assert chosen["a"] == 0 and chosen["b"] > 0 and chosen["c"] > 0
    # the busy node is still chosen when it is the one left
    assert p.choose({"b", "c"}, light=True).id == "a"  # type: ignore[union-attr]


def test_every_node_busy_or_a_better_tier_busy_still_chosen() -> None:
    p, _ = pool(up("a"), up("b", TIER_LAGGING))
    p.started(p.upstreams["a"], heavy=True)
    # the tier comes first: a lagging node is not preferred for being calm
    assert p.choose(set(), light=True).id == "a"  # type: ignore[union-attr]


def test_the_heavy_count_ends_with_each_outcome() -> None:
    p, _ = pool(up("a"), up("b"))
    a = p.upstreams["a"]
    for end in (lambda: p.succeeded(a, 5), lambda: p.failed(a, 5), lambda: p.abandoned(a)):
        p.started(a, heavy=True)
        assert a.heavy_inflight == 1
        end()
        p.heavy_ended(a)
        assert a.heavy_inflight == 0 and a.inflight == 0


class _Recording:
    def __init__(self, pool_: object) -> None:
        self.pool = pool_
        self.heavy_seen: list[int] = []

    async def post(self, url: str, body: bytes, timeout: float) -> tuple[int, bytes]:
        self.heavy_seen.append(sum(u.heavy_inflight for u in self.pool.upstreams.values()))  # type: ignore[attr-defined]
        return 200, b'{"jsonrpc":"2.0","id":0,"result":"0x00"}'


def test_forward_counts_a_heavy_attempt_while_it_runs() -> None:
    p, clock = pool(up("a", TIER_SYNCED), up("b", TIER_SYNCED))
    t = _Recording(p)
    budget = Budget(max_attempts=2, attempt_timeout_s=5, deadline_s=5)
    call = Call(1, "state_getStorage", ["0x01"])

    async def run(heavy: bool) -> None:
        result = await forward(
            [call], is_batch=False, pool=p, transport=t, budget=budget, clock=clock, heavy=heavy
        )
        assert result.kind == "ok"

    asyncio.run(run(True))
    asyncio.run(run(False))
    assert t.heavy_seen == [1, 0]
    assert all(u.heavy_inflight == 0 for u in p.upstreams.values())
