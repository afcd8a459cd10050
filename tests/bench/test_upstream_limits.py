"""Scenario 14's pure parts: how a client call's answer is told apart, one
run's figures (the last half's 429s per its own calls; whose requests the
nodes refused), the ratio and goals."""

from __future__ import annotations

import json
import math

import pytest

from bench.upstream_limits import (
    LIMITS,
    WARMUP_S,
    Outcome,
    RunResult,
    classify,
    refusals,
    sender,
    storage_key,
    summarise,
    verdict,
)


def _body(doc: object) -> bytes:
    return json.dumps(doc).encode()


def test_answers_are_told_apart() -> None:
    ok = {"jsonrpc": "2.0", "id": 1, "result": None}
    capacity = {
        "jsonrpc": "2.0",
        "id": 1,
        "error": {"code": -32005, "message": "busy", "data": {"policy": "upstream_capacity"}},
    }
    assert classify(200, _body(ok)) == "ok"
    assert classify(200, _body([ok])) == "ok"
    assert classify(200, _body({"jsonrpc": "2.0", "id": 1, "error": {"code": 1}})) == "other"
    assert classify(503, _body(capacity)) == "capacity"
    assert classify(503, _body({"error": {"data": {"policy": "other"}}})) == "other"
    assert classify(502, b"Bad Gateway") == "502"
    assert classify(429, b"<html>") == "other"


def test_a_run_counts_the_last_half_against_its_own_calls() -> None:
    calls = [Outcome(t=i / 10, latency_s=0.001 * (i + 1), kind="ok") for i in range(100)]
    calls[10] = Outcome(1.0, 2.0, "capacity")
    calls[60] = Outcome(6.0, None, "other")
    calls[70] = Outcome(7.0, 0.5, "502")
    r = RunResult(
        calls=calls,
        seconds=10.0,
        rate_limited_total=40,
        rate_limited_last_half=5,
        upstream_requests=150,
        max_rps_seen=[15, 15, 14],
    )
    s = summarise(r)
    assert (s["calls"], s["errors"]) == (100, 3)
    assert (s["capacity_503"], s["bad_gateway_502"], s["other_errors"]) == (1, 1, 1)
    assert s["upstream_429_per_1000"] == pytest.approx(400)
    assert s["upstream_429_last_half_per_1000"] == pytest.approx(100)  # 5 of the last 50
    assert s["upstream_calls_per_call"] == pytest.approx(1.5)
    assert s["p99_ms"] == pytest.approx(2000)  # the unanswered call has no latency
    assert math.isnan(summarise(RunResult())["p50_ms"])


def test_each_429_is_put_down_to_whose_request_it_refused() -> None:
    assert sender("chainproxy") == "proxy"
    assert sender("chainproxy-sidecar/0.1") == "probes"
    assert sender("Python/3.12 aiohttp/3.9") == "other"
    log = [
        {"t": 1.0, "agent": "chainproxy", "refused": True},
        {"t": 2.0, "agent": "chainproxy", "refused": False},
        {"t": 5.0, "agent": "chainproxy-sidecar/0.1", "refused": True},
        {"t": 6.0, "agent": "chainproxy", "refused": True},
        {"t": 7.0, "agent": "curl"},  # an older node's log: no verdict
    ]
    assert refusals(log) == {"proxy": 2, "probes": 1, "other": 0}
    assert refusals(log, since=5.0) == {"proxy": 1, "probes": 1, "other": 0}
    calls = [Outcome(t=i / 10, latency_s=0.01, kind="ok") for i in range(100)]
    s = summarise(RunResult(calls=calls, seconds=10.0, refused_after_warmup={"proxy": 3}))
    warm = sum(1 for c in calls if c.t >= WARMUP_S)
    assert s["upstream_429_after_warmup_per_1000"] == pytest.approx(3000 / warm)


def _fig(per_1000: float, last: float, errors: int = 0, **kw: int) -> dict[str, float]:
    return {
        "upstream_429_per_1000": per_1000,
        "upstream_429_last_half_per_1000": last,
        "errors": errors,
        "bad_gateway_502": kw.get("bad", 0),
        "other_errors": kw.get("other", 0),
    }


def test_verdict_wants_quiet_nodes_and_clean_refusals() -> None:
    roomy, tight = LIMITS
    good = {
        roomy: {"before": _fig(500, 500, 40), "after": _fig(50, 2)},
        tight: {"before": _fig(600, 600, 300, bad=300), "after": _fig(200, 8, 180)},
    }
    v = verdict(good)
    assert v["goal_met"] and v["ratio_429"][roomy] == pytest.approx(0.1)
    noisy = {**good, roomy: {**good[roomy], "after": _fig(50, 30)}}
    assert not verdict(noisy)["goal_met"]
    bad_gateway = {**good, tight: {**good[tight], "after": _fig(200, 8, 180, bad=1)}}
    assert not verdict(bad_gateway)["goal_met"]
    failing = {**good, roomy: {**good[roomy], "after": _fig(0, 0, errors=1)}}
    assert not verdict(failing)["goal_met"]


def test_every_call_asks_a_key_of_its_own() -> None:
    keys = {storage_key(tag, i) for tag in range(1, 5) for i in range(1000)}
    assert len(keys) == 4000
