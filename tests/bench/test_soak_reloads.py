"""The soak's reload actions (``bench/soak/plan.py``): rolling restarts and
reloads with a changed rate limit take turns, never overlap each other, a
proxy restart or a sidecar restart, and end before the quiet end; a sidecar
restart or a socket closed during one is explained by it in the report."""

from __future__ import annotations

import itertools

from bench.soak.plan import RELOAD_ACTIONS, RELOAD_S, schedule
from bench.soak.report import in_proxy_restart

NODES = ["alpha", "beta", "gamma"]


def test_reloads_take_turns_and_clash_with_no_restart() -> None:
    kinds_seen: set[str] = set()
    for seed in range(60):
        plan = schedule(600, NODES, seed=seed)
        assert plan == sorted(plan, key=lambda a: a.at)
        reloads = [a for a in plan if a.kind in RELOAD_ACTIONS]
        assert [a.kind for a in reloads] == [RELOAD_ACTIONS[i % 2] for i in range(len(reloads))]
        assert all(a.duration == RELOAD_S and a.until <= 600 - 60 for a in reloads)
        for x, y in itertools.pairwise(reloads):
            assert x.until <= y.at
        for r in reloads:
            for other in (a for a in plan if a.kind in ("proxy", "sidecar")):
                assert other.until + 2 <= r.at or r.until <= other.at - 2, (seed, r, other)
        kinds_seen |= {a.kind for a in reloads}
    assert kinds_seen == set(RELOAD_ACTIONS)


def test_a_three_minute_soak_has_both() -> None:
    with_both = sum(
        {a.kind for a in schedule(180, NODES, seed=s)} >= set(RELOAD_ACTIONS) for s in range(40)
    )
    assert with_both >= 20  # most seeds: `--seconds 180` exercises both


def test_a_socket_closed_during_a_reload_is_explained() -> None:
    plan = schedule(180, NODES, seed=7)
    (rolling, *_) = [a for a in plan if a.kind == "rolling"]
    assert in_proxy_restart(plan, rolling.at + 5)
    assert in_proxy_restart(plan, rolling.until + 1)
