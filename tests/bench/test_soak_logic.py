"""The soak's pure parts: the chaos plan keeps a node healthy, the judge of
answers and of head sequences counts what it claims to count."""

from __future__ import annotations

import itertools

from bench.soak.plan import (
    LIMIT_FAULTS,
    NODE_ACTIONS,
    NODE_FAULTS,
    SMOKE_S,
    faulted_at,
    schedule,
    smoke_plan,
)
from bench.soak.tally import HeadLog, judge_item
from simnode.faults import check_fault

NODES = ["alpha", "beta", "gamma"]


def test_the_plan_never_faults_every_node_and_is_replayable() -> None:
    for seed in range(50):
        plan = schedule(600, NODES, seed=seed)
        assert plan == schedule(600, NODES, seed=seed)
        assert plan and all(a.until <= 600 - 60 for a in plan)  # a quiet end
        for a in plan:
            for t in (a.at, a.at + a.duration / 2):
                assert len(faulted_at(plan, t, NODES)) <= len(NODES) - 1
        for kind in ("sidecar", "proxy", "redis"):
            same = sorted((a for a in plan if a.kind == kind), key=lambda a: a.at)
            assert all(x.until <= y.at for x, y in itertools.pairwise(same))
    assert "redis" not in {a.kind for a in schedule(600, NODES, seed=1, redis=False)}
    assert {a.kind for a in schedule(3600, NODES, seed=3)} >= set(NODE_ACTIONS)


def test_the_smoke_plan_has_each_kind_the_smoke_test_checks_and_a_whole_node() -> None:
    plan = smoke_plan(NODES)
    assert {a.kind for a in plan} == {"kill", "proxy", "sidecar", "redis", "rate_limit"}
    limited = next(a for a in plan if a.kind == "rate_limit")
    killed = next(a for a in plan if a.kind == "kill")
    assert limited.at < killed.at and killed.until <= limited.until  # killed while limited
    assert all(a.until <= SMOKE_S - 10 for a in plan)  # a quiet end, as schedule keeps
    for a in plan:
        for t in (a.at, a.at + a.duration / 2):
            assert len(faulted_at(plan, t, NODES)) <= len(NODES) - 1


def test_every_node_fault_is_one_the_simulated_node_takes() -> None:
    for faults in NODE_FAULTS.values():
        for key, value in faults.items():
            check_fault(key, value)  # raises on a key or value the node would refuse
    assert LIMIT_FAULTS == {"rate_limit", "retry_after"}
    assert "limit_retry_after_s" not in NODE_FAULTS["rate_limit"]  # no Retry-After
    assert NODE_FAULTS["retry_after"]["limit_retry_after_s"] == 2


def test_answers_are_judged_by_the_wire_contract() -> None:
    ok = {"jsonrpc": "2.0", "id": 1, "result": None}
    node_error = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "bad"}}
    quota = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32005, "message": "slow down"}}
    allow = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32601, "message": "no"}}
    proxy = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "all failed"}}
    assert judge_item(ok, expect_refusal=False)[:2] == ("ok", True)
    assert judge_item(node_error, expect_refusal=False)[:2] == ("ok", True)
    assert judge_item(quota, expect_refusal=False)[:2] == ("refused", False)
    assert judge_item(allow, expect_refusal=True)[:2] == ("refused", False)
    assert judge_item(allow, expect_refusal=False)[0] == "error"  # a read refused
    assert judge_item(ok, expect_refusal=True)[0] == "error"  # a write answered
    assert judge_item(proxy, expect_refusal=False)[:2] == ("error", True)
    assert judge_item("<html>", expect_refusal=False)[:2] == ("error", False)


def test_head_log_tells_gaps_duplicates_reorgs_and_fork_switches() -> None:
    h = HeadLog()
    h.add(0, 10, "a", "p")
    h.add(1, 11, "b", "a")  # linked
    h.add(2, 13, "d", "c")  # 12 missed
    h.add(3, 13, "d", "c")  # the same head again
    h.add(4, 13, "e", "c")  # another block at 13: a reorg
    h.add(9, 14, "f", "zz")  # not on the head before
    assert (h.gaps, h.duplicates, h.reorgs, h.unlinked) == (1, 1, 1, 1)
    assert h.delivered == 6 and h.longest_silence_s == 5
