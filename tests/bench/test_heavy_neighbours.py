"""Scenario 13's pure parts: one run's summary over its repetitions, the
ratios against the light-only run and the goal, the clients' own keys and
addresses (distinct, so no cache hit and one quota each)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from bench.heavy_neighbours import LANE, RUNS, pct, summarise, verdict
from bench.neighbour_clients import (
    HEAVY,
    LIGHT,
    Tally,
    client_ips,
    heavy_call,
    merge,
    storage_key,
)


def test_summary_pools_the_repetitions() -> None:
    a = Tally(light=[0.001 * i for i in range(1, 51)], light_errors=1, heavy_ok=3, heavy_429=2)
    b = Tally(light=[0.001 * i for i in range(51, 101)], heavy_ok=4, heavy_errors=1, heavy_hedged=2)
    out = summarise([a, b], upstream_bytes=3 << 20, seconds=30)
    assert out["light_calls"] == 100
    assert out["light_p50_ms"] == pytest.approx(51) and out["light_p99_ms"] == pytest.approx(100)
    assert (out["light_errors"], out["heavy_ok"], out["heavy_429"]) == (1, 7, 2)
    assert (out["heavy_errors"], out["heavy_hedged"]) == (1, 2)
    assert out["upstream_mib_per_min"] == pytest.approx(6.0)
    assert math.isnan(pct([], 0.99)) and summarise([], 0, 0)["upstream_mib_per_min"] == 0.0


def _run(p99: float, errors: int = 0) -> dict[str, float]:
    return {"light_p99_ms": p99, "light_errors": errors}


def _runs(units: dict[str, float], lane: dict[str, float] | None = None) -> dict[str, Any]:
    return {"light only": _run(20), "units": units, "counting": _run(200), LANE: lane or _run(20)}


def test_verdict_is_the_ratio_to_the_light_only_run() -> None:
    v = verdict(_runs(_run(29), _run(41)))
    assert v["units_p99_ratio"] == pytest.approx(1.45)
    assert v["counting_p99_ratio"] == pytest.approx(10)
    assert v["lane_p99_ratio"] == pytest.approx(2.05)
    assert v["goal_met"] and not v["lane_goal_met"]
    assert verdict(_runs(_run(29), _run(40)))["lane_goal_met"]  # issue 37: <= 2x
    assert not verdict(_runs(_run(31)))["goal_met"]
    assert not verdict(_runs(_run(20, 1)))["goal_met"]
    assert verdict(_runs(_run(31), _run(25)))["lane_goal_met"]
    assert not verdict(_runs(_run(31), _run(25, errors=1)))["lane_goal_met"]
    assert RUNS == ("light only", "units", "counting", LANE)


def test_clients_have_their_own_keys_and_addresses() -> None:
    keys = {
        storage_key(c, n, k, tag)
        for c in range(3)
        for n in range(3)
        for k in range(3)
        for tag in (1, 2)
    }
    assert len(keys) == 54
    calls = [heavy_call(c, i, 1) for c in range(2) for i in range(4)]
    assert {c["method"] for c in calls} == {"state_call", "state_getKeysPaged"}
    assert len({str(c["params"]) for c in calls}) == len(calls)
    assert all(c["params"][1] == 1000 for c in calls if c["method"] == "state_getKeysPaged")
    ips = [ip for run in range(4) for group in client_ips(run) for ip in group]
    assert len(ips) == len(set(ips)) == 4 * (LIGHT + HEAVY)
    assert all(ip.startswith("127.0.") for ip in ips)


def test_the_client_processes_tallies_merge() -> None:
    light = Tally(light=[0.001, 0.002], light_errors=1)
    heavy = Tally(heavy_ok=3, heavy_429=1, heavy_503=2, heavy_errors=1, heavy_hedged=1)
    both = merge([light, heavy])
    assert both.light == [0.001, 0.002] and both.light_errors == 1
    assert (both.heavy_ok, both.heavy_429, both.heavy_503, both.heavy_errors) == (3, 1, 2, 1)
    assert both.heavy_hedged == 1
