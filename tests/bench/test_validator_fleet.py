"""Scenario 17's and 18's pure parts: the sync a validator makes, how a read's
cache outcome is told apart, the first client of each block, one variant's
figures and the goal; the cross-check's extra share and the sidecar's metric
text."""

from __future__ import annotations

import math

import pytest

from addon.chain.head_pinning import HASH_POSITION
from bench.cross_check_cost import extra_share, metric_values, storage_key
from bench.fleet_figures import (
    Phase,
    Sync,
    block_number,
    cache_kind,
    firsts,
    proxy_reads,
    summarise,
    verdict,
)
from bench.validator_fleet import SYNC, neurons_lite_params
from simnode.chain import HEAVY_CALL_BYTES


def test_a_sync_is_hash_less_and_reads_the_heavy_runtime_api_first() -> None:
    method, params = SYNC[0]
    assert method == "state_call" and params[0] in HEAVY_CALL_BYTES and params[1] == "0x"
    assert neurons_lite_params(1) == "0x0100"  # u16, little-endian
    assert neurons_lite_params(258) == "0x0201"
    for method, params in SYNC:  # the block parameter left out: head pinning pins it
        assert len(params) <= HASH_POSITION[method]
    keys = [p[0] for m, p in SYNC if m == "state_getStorage"]
    assert keys and all(not k.startswith("0x00") for k in keys)  # 0x00…: absent on simnode


def test_a_read_is_a_hit_joined_or_miss() -> None:
    assert cache_kind({"X-Cache": "HIT"}) == "hit"
    assert cache_kind({"X-Cache": "MISS", "X-Chainproxy-Coalesced": "1"}) == "joined"
    assert cache_kind({"X-Cache": "MISS"}) == "miss"
    assert cache_kind({}) == "miss"
    assert block_number({"number": "0x10"}) == 16
    assert block_number(None) is None and block_number({"number": "zz"}) is None


def _sync(block: int, client: int, start: float, latency: float, first: str = "miss") -> Sync:
    return Sync(block, client, start, latency, 0, first)


def test_the_first_client_is_the_one_that_learned_the_block_first() -> None:
    syncs = [
        _sync(10, 1, 5.0, 0.5),
        _sync(10, 2, 4.9, 0.9),  # first at block 10, though slower
        _sync(11, 1, 8.0, 0.1),
        _sync(12, 3, 11.0, 0.2),  # not a measured block
    ]
    assert [(s.block, s.client) for s in firsts(syncs, [10, 11])] == [(10, 2), (11, 1)]


def test_a_variant_counts_only_its_measured_blocks() -> None:
    syncs = [
        _sync(9, 0, 0.0, 9.0),  # warm-up: ignored
        _sync(10, 0, 3.0, 0.2, "joined"),
        _sync(10, 1, 3.1, 0.1, "hit"),
        _sync(11, 0, 6.0, 0.4, "hit"),
        Sync(11, 1, 6.1, 0.3, 2, "error"),
    ]
    p = Phase(syncs, [10, 11], {"state_call": 8, "state_getStorage": 6}, proxy_cpu_s=1.0)
    s = summarise([p])
    assert s["blocks"] == 2 and s["syncs"] == 4 and s["errors"] == 2
    assert s["first_read"] == {"hit": 1, "joined": 1, "miss": 0}
    assert s["first_p50_ms"] == pytest.approx(400)  # of 200 and 400 ms: the upper
    assert s["upstream_per_block"] == pytest.approx(7)
    assert s["proxy_cpu_ms_per_block"] == pytest.approx(500)
    assert math.isnan(summarise([Phase()])["upstream_per_block"])


def _figures(first_ms: float, hit: int, joined: int, miss: int, upstream: float) -> dict:
    blocks = hit + joined + miss
    return {
        "blocks": blocks,
        "first_p50_ms": first_ms,
        "first_read": {"hit": hit, "joined": joined, "miss": miss},
        "upstream_per_block": upstream,
        "errors": 0,
    }


def test_upstream_reads_are_the_proxies_own_in_the_window() -> None:
    def arrival(t: float, agent: str, *methods: str) -> dict[str, object]:
        return {"t": t, "agent": agent, "methods": list(methods), "calls": len(methods)}

    log = [
        arrival(9.0, "chainproxy", "state_call"),  # before the window
        arrival(10.5, "chainproxy", "state_call"),
        arrival(11.0, "chainproxy", "state_getStorage", "state_getKeysPaged"),  # a batch
        arrival(11.5, "chainproxy", "chain_getHeader"),  # not a sync's method
        # the sidecar's state probes: not the proxies' reads
        arrival(12.0, "chainproxy-sidecar/0.1", "state_getStorage", "state_getStorage"),
        arrival(13.0, "chainproxy", "state_getStorage"),  # at the window's end: in
        arrival(13.5, "chainproxy", "state_getStorage"),  # after it
    ]
    assert proxy_reads(log, 10.0, 13.0) == {
        "state_call": 1,
        "state_getStorage": 2,
        "state_getKeysPaged": 1,
    }


def test_the_goal_wants_every_block_warm_and_one_upstream_call_per_read() -> None:
    off = _figures(400, 0, 0, 6, len(SYNC))
    runs = {
        ("subscription", "on"): _figures(100, 2, 4, 0, len(SYNC)),
        ("subscription", "off"): off,
        ("polling", "on"): _figures(200, 5, 0, 1, len(SYNC)),  # one block cold
        ("polling", "off"): off,
    }
    v = verdict(runs, len(SYNC))
    assert v["subscription"]["goal_met"] and v["subscription"]["first_p50_ratio"] == 0.25
    assert not v["polling"]["goal_met"] and v["polling"]["warm_share"] == pytest.approx(5 / 6)
    runs["subscription", "on"] = _figures(100, 6, 0, 0, 2 * len(SYNC))  # fetched twice
    assert not verdict(runs, len(SYNC))["subscription"]["goal_met"]


def test_the_cross_checks_extra_share_is_against_the_run_without() -> None:
    assert extra_share((1_015, 1_000), (1_002, 1_000)) == pytest.approx(0.013)
    assert math.isnan(extra_share((10, 0), (10, 10)))
    assert storage_key(1, 2) != storage_key(2, 1)
    assert not storage_key(0, 0).startswith("0x00")


def test_the_sidecars_counters_are_summed_per_outcome() -> None:
    text = "\n".join(
        [
            "# TYPE chainproxy_prewarm_total counter",
            'chainproxy_prewarm_total{network="finney",outcome="fetched"} 12',
            'chainproxy_prewarm_total{network="test",outcome="fetched"} 3',
            'chainproxy_prewarm_total{network="finney",outcome="used"} 9.0',
            'chainproxy_cross_checks_total{network="finney",outcome="agree"} 4',
        ]
    )
    assert metric_values(text, "chainproxy_prewarm_total") == {"fetched": 15.0, "used": 9.0}
    assert metric_values(text, "chainproxy_cross_checks_total") == {"agree": 4.0}
    assert metric_values(text, "chainproxy_other_total") == {}
