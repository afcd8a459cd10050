"""Hedging: no hedge before enough answers, then the p95 delay clamped, the budget
keeping hedges under their ratio, and the forward loop racing a slow upstream (real
asyncio timing, tens of milliseconds)."""

from __future__ import annotations

import asyncio
import json
import time

from addon.pipeline.jsonrpc import Call
from addon.upstream.forward import Budget, ForwardResult, TransportError, forward
from addon.upstream.hedge import Hedger
from addon.upstream.pool import TIER_SYNCED, Upstream, UpstreamPool
from common.config.upstream_calls import HedgeConfig

H = "0x" + "ab" * 32


def test_no_hedge_before_enough_answers_then_the_p95_clamped() -> None:
    h = Hedger(HedgeConfig(min_delay_ms=50, max_delay_ms=400))
    for _ in range(19):
        h.observe(10.0)
    assert h.delay() is None
    h.observe(10.0)
    assert h.delay() == 0.05  # p95 of 10 ms is under the floor
    for ms in range(1, 1001):
        h.observe(float(ms))
    assert h.delay() == 0.4  # p95 ~ 950 ms: capped
    off = Hedger(HedgeConfig(enabled=False))
    for _ in range(50):
        off.observe(100.0)
    assert off.delay() is None and not off.can_hedge()


def test_the_budget_keeps_hedges_under_the_ratio() -> None:
    h = Hedger(HedgeConfig(max_ratio=0.1))
    for _ in range(1000):
        h.call()
        if h.can_hedge():
            h.hedged()  # every call wants a hedge: the budget decides
    assert h.hedges <= 0.1 * h.calls + 1


class SleepyTransport:
    """Real asyncio sleeps per URL; records what was started and cancelled."""

    def __init__(self, delays: dict[str, float]) -> None:
        self.delays = delays
        self.started: list[str] = []
        self.cancelled: list[str] = []

    async def post(self, url: str, body: bytes, timeout: float) -> tuple[int, bytes]:
        self.started.append(url)
        delay = self.delays[url]
        try:
            if delay > timeout:
                await asyncio.sleep(timeout)
                raise TransportError("timeout")
            await asyncio.sleep(delay)
        except asyncio.CancelledError:
            self.cancelled.append(url)
            raise
        doc = json.loads(body)
        return 200, json.dumps({"jsonrpc": "2.0", "id": doc["id"], "result": url}).encode()


def _pool(*names: str) -> UpstreamPool:
    ups = []
    for n in names:
        u = Upstream(id=n, url=f"http://{n}", provider=n, archive=False)
        u.tier = TIER_SYNCED
        ups.append(u)
    return UpstreamPool(ups, eject_after=3, eject_cooldown_s=30, clock=time.monotonic)


def _warm(h: Hedger, ms: float = 5.0) -> Hedger:
    for _ in range(40):
        h.observe(ms)
    return h


async def _forward(pool: UpstreamPool, t: SleepyTransport, h: Hedger | None) -> ForwardResult:
    return await forward(
        [Call(1, "state_getRuntimeVersion", [H])],
        is_batch=False,
        pool=pool,
        transport=t,
        budget=Budget(max_attempts=3, attempt_timeout_s=5, deadline_s=10),
        clock=time.monotonic,
        hedger=h,
    )


async def test_a_slow_upstream_is_raced_and_the_first_good_answer_wins() -> None:
    pool = _pool("slow", "fast")
    t = SleepyTransport({"http://slow": 2.0, "http://fast": 0.01})
    pool.upstreams["fast"].score = 0.01  # chosen second
    h = _warm(Hedger(HedgeConfig(min_delay_ms=50)))
    started = time.monotonic()
    r = await _forward(pool, t, h)
    assert time.monotonic() - started < 1.0  # not the 2 s of the slow one
    await asyncio.sleep(0)  # the loser's cancellation runs
    assert r.kind == "ok" and r.hedged and r.upstream is not None and r.upstream.id == "fast"
    assert t.started == ["http://slow", "http://fast"] and t.cancelled == ["http://slow"]
    assert [a.endpoint for a in r.attempts] == ["fast"]  # the loser is no failed attempt
    assert all(u.inflight == 0 for u in pool.upstreams.values())
    assert h.hedges == 1


async def test_no_hedge_without_budget_or_a_second_upstream() -> None:
    t = SleepyTransport({"http://slow": 0.2, "http://fast": 0.01})
    h = _warm(Hedger(HedgeConfig(min_delay_ms=50, max_ratio=0.01)))
    h._tokens = 0.0  # spent
    pool = _pool("slow", "fast")
    pool.upstreams["fast"].score = 0.01
    r = await _forward(pool, t, h)
    assert not r.hedged and r.upstream is not None and r.upstream.id == "slow"
    alone = _pool("slow")
    r = await _forward(alone, SleepyTransport({"http://slow": 0.2}), _warm(Hedger(HedgeConfig())))
    assert r.kind == "ok" and not r.hedged


async def test_a_hedge_that_fails_leaves_the_first_to_answer() -> None:
    t = SleepyTransport({"http://slow": 0.3, "http://dead": 99.0})
    pool = _pool("slow", "dead")
    pool.upstreams["dead"].score = 0.01
    r = await forward(
        [Call(1, "system_health", [])],
        is_batch=False,
        pool=pool,
        transport=t,
        budget=Budget(max_attempts=3, attempt_timeout_s=1.0, deadline_s=10),
        clock=time.monotonic,
        hedger=_warm(Hedger(HedgeConfig(min_delay_ms=50))),
    )
    assert r.kind == "ok" and r.upstream is not None and r.upstream.id == "slow" and r.hedged
    assert all(u.inflight == 0 for u in pool.upstreams.values())
