"""A 32 s smoke of ``make soak``: the same stack, clients and kinds of chaos
(``bench.soak.plan.smoke_plan``: a proxy restarted after SIGTERM, Redis and
the sidecar killed and restarted, a node rate-limited to 3 calls a second and,
while it is limited, another killed: one node is left whole), judged by the
soak's own goals. It was 60 s of the seeded schedule (seed 129213), whose
chaos began 20 s in; the same five actions packed from 4 s on check the same
in half the time."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak.__main__ import soak
from bench.soak.plan import SMOKE_S, smoke_plan
from bench.soak.report import figures, render
from bench.soak.stack import SoakStack
from chainproxy.workers import find_tool

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        find_tool("haproxy") is None or find_tool("redis-server") is None,
        reason="needs haproxy and redis-server (make scale-deps)",
    ),
]

SEED = 129213


async def test_half_a_minute_of_chaos_loses_nothing(tmp_path: Path) -> None:
    stack = SoakStack(tmp_path)
    try:
        stack.start()
        result = await soak(stack, SMOKE_S, SEED, smoke_plan(list(stack.nodes)))
    finally:
        stack.stop()
    kinds = {a.kind for a in result.actions}
    assert {"kill", "proxy", "sidecar", "redis", "rate_limit"} <= kinds  # the chaos really ran
    assert not result.chaos_failures, result.chaos_failures
    assert result.upstream_429 > 0  # the limited node did refuse calls
    assert result.restarts.get("proxy-2") == 1 and result.restarts.get("sidecar") == 1
    f = figures(result)
    text = render(result)
    c = f["counts"]
    assert c["sent"] > 1000 and c.get("refused", 0) > 0, text  # traffic, 403s and 429s
    assert c.get("error", 0) == 0, text
    assert f["usage_records"] == c["recorded"], text  # nothing lost, nothing twice
    heads = f["heads"]
    assert heads["subscriptions"] >= 4 and heads["delivered"] > 40, text
    assert heads["with_gap"] == 0 and heads["with_duplicate"] == 0, text
    assert f["sockets_closed_unexplained"] == 0, text  # only a stopping proxy closes one
