"""Choosing an upstream for a call that needs a block: nodes below it are passed over
while another has it, and used as a last resort."""

from __future__ import annotations

import random
from typing import Any

from addon.chain.routing_hints import hints
from addon.rpc.blocks import BlockIndex
from addon.rpc.jsonrpc import Call
from addon.upstream.pool import TIER_LAGGING, TIER_SYNCED, TIER_UNHEALTHY, Upstream, UpstreamPool


def h(n: int) -> str:
    """A block hash (0x + 64 hex) made from a number."""
    return "0x" + f"{n:064x}"


def call(method: str, *params: Any, id_: Any = 1) -> Call:
    return Call(id_, method, list(params))


def index_with(*heights: int) -> BlockIndex:
    idx = BlockIndex()
    for n in heights:
        idx.put(h(n), n)
    return idx


def pool(*ups: tuple[str, int, int | None], seed: int = 1) -> UpstreamPool:
    """(id, tier, best) triples."""
    items = []
    for id_, tier, best in ups:
        u = Upstream(id=id_, url=f"https://{id_}.example.org", provider=id_, archive=False)
        u.tier, u.best = tier, best
        items.append(u)
    return UpstreamPool(
        items, eject_after=3, eject_cooldown_s=30.0, clock=lambda: 1000.0, rng=random.Random(seed)
    )


def picks(p: UpstreamPool, n: int = 60, **kw: Any) -> set[str]:
    out = set()
    for _ in range(n):
        u = p.choose(set(), **kw)
        assert u is not None
        out.add(u.id)
    return out


def test_upstreams_below_min_block_are_passed_over() -> None:
    p = pool(("low", TIER_SYNCED, 99), ("high", TIER_SYNCED, 100), ("higher", TIER_SYNCED, 105))
    assert picks(p, min_block=100) == {"high", "higher"}
    assert picks(p, min_block=None) == {"low", "high", "higher"}


def test_unknown_best_is_not_passed_over() -> None:
    p = pool(("low", TIER_SYNCED, 50), ("fresh", TIER_SYNCED, None))
    assert picks(p, min_block=100) == {"fresh"}


def test_a_lagging_upstream_that_has_the_block_beats_a_synced_one_that_does_not() -> None:
    p = pool(("synced", TIER_SYNCED, 99), ("lagging", TIER_LAGGING, 100))
    assert picks(p, min_block=100) == {"lagging"}


def test_below_min_block_is_still_chosen_when_nothing_else_is_left() -> None:
    p = pool(("a", TIER_SYNCED, 90), ("b", TIER_UNHEALTHY, 80))
    assert picks(p, min_block=100) == {"a"}  # the usual tier order among them
    p = pool(("a", TIER_SYNCED, 90), ("high", TIER_SYNCED, 200))
    assert p.choose({"high"}, min_block=100) is p.upstreams["a"]  # high already tried
    assert p.choose({"a", "high"}, min_block=100) is None


def test_min_block_from_hints_steers_the_choice() -> None:
    p = pool(("behind", TIER_SYNCED, 1_000), ("ahead", TIER_SYNCED, 1_002))
    need = hints([call("chain_getBlockHash", 1_001)], tip=1_002, index=BlockIndex()).min_block
    assert picks(p, min_block=need) == {"ahead"}


def test_when_nobody_has_the_block_yet_the_most_advanced_goes_first() -> None:
    p = pool(("a", TIER_SYNCED, 97), ("b", TIER_SYNCED, 99), ("c", TIER_SYNCED, 98))
    assert picks(p, min_block=100) == {"b"}
    tried = {"b"}
    nxt = p.choose(tried, min_block=100)
    assert nxt is not None and nxt.id == "c"


def test_a_call_pinned_to_a_known_recent_hash_needs_a_node_at_that_height() -> None:
    tip = 10_000
    got = hints([call("state_call", "Core_version", "0x", h(tip))], tip=tip, index=index_with(tip))
    assert got.min_block == tip and got.prefer_archive is False
    unknown = hints([call("state_call", "Core_version", "0x", h(5))], tip=tip, index=BlockIndex())
    assert unknown.min_block is None  # nothing known of that hash: any node
