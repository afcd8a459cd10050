"""Hedging: no hedge before enough answers, then the p95 delay clamped, the budget
keeping hedges under their ratio, and the forward loop racing a slow upstream (real
asyncio timing, tens of milliseconds)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from addon.rpc.jsonrpc import Call
from addon.upstream import hedge
from addon.upstream.admission import Admission
from addon.upstream.budgets import Budgets
from addon.upstream.fair_wait import FairWait
from addon.upstream.forward import Budget, ForwardResult, TransportError, forward
from addon.upstream.hedge import Hedger, cancel_outraced, hedge_kind, outraced_in_flight
from addon.upstream.pool import TIER_SYNCED, Upstream, UpstreamPool
from common.config import Endpoint
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


def test_a_kind_of_call_waits_its_own_quantile() -> None:
    """The network's cheap calls set its delay at the floor; a runtime API that
    always takes 80 ms waits for its own p95, not the network's."""
    h = Hedger(HedgeConfig(min_delay_ms=50, max_delay_ms=2000))
    lite = hedge_kind(
        [Call(1, "state_call", ["NeuronInfoRuntimeApi_get_neurons_lite", "0x01"])], False
    )
    for _ in range(100):
        h.observe(5.0, "chain_getHeader")
    assert h.delay() == h.delay("chain_getHeader") == 0.05
    assert h.delay(lite) == 0.05  # a kind never seen: the network's delay
    h.observe(80.0, lite)
    assert h.delay(lite) == 0.08  # too few of its own: never under its slowest answer
    for _ in range(3):
        for ms in range(60, 90):
            h.observe(float(ms), lite)
            for _ in range(30):  # a fleet's polls: most of the network's answers
                h.observe(5.0, "chain_getHeader")
    assert 0.08 < h.delay(lite) <= 0.09  # its own p95 (of 60..89 ms), over its slowest
    assert h.delay("chain_getHeader") == 0.05  # the cheap kind's own quantile: the floor
    assert h.delay() == 0.05  # the network's: 5 ms calls are most of its answers
    h.observe(5000.0, lite)
    assert 0.08 < h.delay(lite) <= 0.09  # one slow answer is above its p95
    off = Hedger(HedgeConfig(enabled=False))
    for _ in range(50):
        off.observe(100.0, lite)
    assert off.delay(lite) is None


def test_kinds_are_bounded_the_least_recently_answered_go() -> None:
    """A client's made-up runtime API names cannot crowd the real kinds out."""
    h = _warm(Hedger(HedgeConfig(min_delay_ms=50)))
    for _ in range(3):
        h.observe(400.0, "state_call:Real_api")
    for i in range(300):
        h.observe(400.0, f"state_call:Made_up{i}")
        h.observe(400.0, "state_call:Real_api")  # answered all along
        for _ in range(60):
            h.observe(5.0)  # most of the network's answers: its delay stays at the floor
    assert len(h._kinds) == 256
    assert h.delay() == 0.05
    assert h.delay("state_call:Real_api") == 0.4  # kept: answered recently
    assert h.delay("state_call:Made_up299") == 0.4  # kept: never under its slowest
    assert h.delay("state_call:Made_up0") == 0.05  # dropped: the network's delay


def test_the_kind_is_the_method_or_the_runtime_api() -> None:
    assert hedge_kind([Call(1, "state_getStorage", ["0x00"])], False) == "state_getStorage"
    assert hedge_kind([Call(1, "state_call", ["Core_version", "0x"])], False) == (
        "state_call:Core_version"
    )
    assert hedge_kind([Call(1, "state_call", [7])], False) == "state_call"
    named = Call(1, "state_call", {"name": "Core_version"})  # Substrate's name for it
    assert hedge_kind([named], False) == "state_call:Core_version"
    assert hedge_kind([Call(1, "system_health", [])], True) == "batch"
    assert hedge_kind([Call(1, "a", []), Call(2, "b", [])], True) == "batch"
    assert len(hedge_kind([Call(1, "state_call", ["X" * 10_000, "0x"])], False)) < 200


def test_the_budget_keeps_hedges_under_the_ratio() -> None:
    h = Hedger(HedgeConfig(max_ratio=0.1))
    for _ in range(1000):
        h.call()
        if h.can_hedge():
            h.hedged()  # every call wants a hedge: the budget decides
    assert h.hedges <= 0.1 * h.calls + 1


def test_an_upstream_batch_earns_its_calls_shares() -> None:
    """An upstream batch of 8 clients' reads earns what 8 calls alone would:
    batching never leaves a stalled burst without the hedge its calls earned."""
    alone, batched = Hedger(HedgeConfig(max_ratio=0.1)), Hedger(HedgeConfig(max_ratio=0.1))
    for _ in range(40):
        for _ in range(8):
            alone.call()
        batched.call(8)
    assert batched.calls == alone.calls == 320
    while batched.can_hedge():
        batched.hedged()
        assert alone.can_hedge()
        alone.hedged()
    assert batched.hedges == alone.hedges >= 1


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


async def _outraced_ended() -> None:
    """Until the outraced attempts still running have ended (and been settled:
    their done callbacks run before gather's)."""
    await asyncio.gather(*hedge._OUTRACED, return_exceptions=True)


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
    t = SleepyTransport({"http://slow": 0.3, "http://fast": 0.01})
    pool.upstreams["fast"].score = 0.01  # chosen second
    h = _warm(Hedger(HedgeConfig(min_delay_ms=50)))
    r = await _forward(pool, t, h)
    assert r.kind == "ok" and r.hedged and r.upstream is not None and r.upstream.id == "fast"
    assert t.started == ["http://slow", "http://fast"]
    assert [a.endpoint for a in r.attempts] == ["fast"]  # the loser is no failed attempt
    assert h.hedges == 1
    # the outraced attempt is not cancelled: it goes on, and still counts in flight
    slow = pool.upstreams["slow"]
    assert outraced_in_flight() == 1 and slow.inflight == 1 and slow.ewma_ms == 0.0
    await _outraced_ended()
    assert t.cancelled == [] and all(u.inflight == 0 for u in pool.upstreams.values())
    # the pool learned its real latency (300 ms), not the hedge delay (50 ms)
    assert slow.ewma_ms >= 250 and slow.consecutive_failures == 0
    assert pool.upstreams["fast"].ewma_ms < slow.ewma_ms


async def test_the_outraced_attempts_budget_ticket_is_held_until_it_ends() -> None:
    eps = [
        Endpoint(url=f"http://{n}", provider=n, kind="rpc-http", network="finney", id=n)
        for n in ("slow", "fast")
    ]
    budgets = Budgets(eps, clock=time.monotonic)
    pool = _pool("slow", "fast")
    pool.upstreams["fast"].score = 0.01
    t = SleepyTransport({"http://slow": 0.2, "http://fast": 0.01})
    admission = Admission(budgets, FairWait(), client="c", max_wait_s=0.0, clock=time.monotonic)
    r = await forward(
        [Call(1, "state_getRuntimeVersion", [H])],
        is_batch=False,
        pool=pool,
        transport=t,
        budget=Budget(max_attempts=3, attempt_timeout_s=5, deadline_s=10),
        clock=time.monotonic,
        hedger=_warm(Hedger(HedgeConfig(min_delay_ms=50))),
        admission=admission,
    )
    assert r.hedged and r.upstream is not None and r.upstream.id == "fast"
    assert budgets.node("slow").inflight == 1  # the outraced one still holds its place
    await _outraced_ended()
    assert budgets.node("slow").inflight == 0 and budgets.node("fast").inflight == 0


async def test_a_cancelled_flow_cancels_both_racers_and_cancel_outraced_ends_the_rest() -> None:
    pool = _pool("slow", "dead")
    pool.upstreams["dead"].score = 0.01
    racing = asyncio.Event()

    class Racing(SleepyTransport):
        async def post(self, url: str, body: bytes, timeout: float) -> tuple[int, bytes]:
            if len(self.started) == 1:
                racing.set()
            return await super().post(url, body, timeout)

    t = Racing({"http://slow": 5.0, "http://dead": 5.0})
    flow = asyncio.ensure_future(_forward(pool, t, _warm(Hedger(HedgeConfig(min_delay_ms=50)))))
    await racing.wait()
    await asyncio.sleep(0)  # the hedge's post is under way
    flow.cancel()
    with pytest.raises(asyncio.CancelledError):
        await flow
    await asyncio.sleep(0)
    assert sorted(t.cancelled) == ["http://dead", "http://slow"]
    assert outraced_in_flight() == 0 and all(u.inflight == 0 for u in pool.upstreams.values())
    # an outraced attempt left running is cancelled at shutdown, and settled
    pool = _pool("slow", "fast")
    pool.upstreams["fast"].score = 0.01
    t = SleepyTransport({"http://slow": 5.0, "http://fast": 0.01})
    r = await _forward(pool, t, _warm(Hedger(HedgeConfig(min_delay_ms=50))))
    assert r.upstream is not None and r.upstream.id == "fast" and outraced_in_flight() == 1
    cancel_outraced()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert outraced_in_flight() == 0 and t.cancelled == ["http://slow"]
    assert pool.upstreams["slow"].inflight == 0 and pool.upstreams["slow"].ewma_ms == 0.0


async def test_an_attempt_no_hedge_can_race_runs_in_the_callers_task() -> None:
    """No task and no wait for it: hedging off, no delay learned yet, no budget
    left, no other node to race it; with a delay learned and a second node, the
    attempt is a task a hedge can race."""
    ran_in: list[asyncio.Task[object] | None] = []

    class Where(SleepyTransport):
        async def post(self, url: str, body: bytes, timeout: float) -> tuple[int, bytes]:
            ran_in.append(asyncio.current_task())
            return await super().post(url, body, timeout)

    spent = _warm(Hedger(HedgeConfig()))
    spent._tokens = 0.0
    for h in (None, Hedger(HedgeConfig()), _warm(Hedger(HedgeConfig(enabled=False))), spent):
        ran_in.clear()
        r = await _forward(_pool("a", "b"), Where({"http://a": 0.0, "http://b": 0.0}), h)
        assert r.kind == "ok" and ran_in == [asyncio.current_task()]
    ran_in.clear()
    alone = await _forward(_pool("a"), Where({"http://a": 0.0}), _warm(Hedger(HedgeConfig())))
    assert alone.kind == "ok" and ran_in == [asyncio.current_task()]  # a pool of one
    ran_in.clear()
    h = _warm(Hedger(HedgeConfig()))
    r = await _forward(_pool("a", "b"), Where({"http://a": 0.0, "http://b": 0.0}), h)
    assert r.kind == "ok" and len(ran_in) == 1 and ran_in[0] is not asyncio.current_task()


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


async def test_a_read_slow_by_its_kind_is_not_hedged_one_slow_for_it_is() -> None:
    """Through the forward: the network's answers are 5 ms, but this kind's
    are ~400 ms; a 200 ms answer is its normal (one upstream call), an 800 ms
    one is slow for it (raced after 400 ms)."""
    h = _warm(Hedger(HedgeConfig(min_delay_ms=50)))
    kind = hedge_kind([Call(1, "state_getRuntimeVersion", [H])], False)
    for _ in range(40):
        h.observe(400.0, kind)
    pool = _pool("slow", "fast")
    pool.upstreams["fast"].score = 0.01
    t = SleepyTransport({"http://slow": 0.2, "http://fast": 0.01})
    r = await _forward(pool, t, h)
    assert r.kind == "ok" and not r.hedged and t.started == ["http://slow"]
    pool = _pool("slow", "fast")  # anew: this one learned the slow node's 200 ms
    pool.upstreams["fast"].score = 0.01
    t = SleepyTransport({"http://slow": 0.8, "http://fast": 0.01})
    r = await _forward(pool, t, h)
    assert r.kind == "ok" and r.hedged and t.started == ["http://slow", "http://fast"]
    await _outraced_ended()


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
    # the outraced hedge goes on to its attempt timeout, then counts as failed
    dead = pool.upstreams["dead"]
    assert dead.inflight == 1 and dead.failures == 0
    await _outraced_ended()
    assert all(u.inflight == 0 for u in pool.upstreams.values()) and dead.failures == 1
