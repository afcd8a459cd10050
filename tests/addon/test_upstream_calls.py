"""Issue 15's rules, one unit at a time: head pinning (which calls, which
head), in-flight coalescing, the hedge delay and budget, and the forward loop
racing a slow upstream (real asyncio timing, tens of milliseconds)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from addon.chain.head_book import HeadBook
from addon.chain.head_pinning import HASH_POSITION, pin
from addon.chain.header_hash import header_hash
from addon.pipeline.jsonrpc import Call
from addon.upstream.coalesce import Coalescer, coalesce_key
from addon.upstream.forward import Budget, ForwardResult, TransportError, forward
from addon.upstream.hedge import Hedger
from addon.upstream.pool import TIER_SYNCED, Upstream, UpstreamPool
from common.config.upstream_calls import HedgeConfig

H = "0x" + "ab" * 32
OTHER = "0x" + "cd" * 32


def header(n: int, parent: str = "0x" + "11" * 32) -> dict[str, Any]:
    return {
        "parentHash": parent,
        "number": hex(n),
        "stateRoot": "0x" + "22" * 32,
        "extrinsicsRoot": "0x" + "33" * 32,
        "digest": {"logs": []},
    }


# --- head pinning: which calls ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "params", "pinned"),
    [
        ("state_getStorage", ["0x01"], ["0x01", H]),
        ("state_getStorage", ["0x01", None], ["0x01", H]),
        (
            "state_call",
            ["NeuronInfoRuntimeApi_get_neurons_lite", "0x0100"],
            ["NeuronInfoRuntimeApi_get_neurons_lite", "0x0100", H],
        ),
        ("state_getKeysPaged", ["0x26aa", 100], ["0x26aa", 100, None, H]),
        ("state_getKeysPaged", ["0x26aa", 100, "0x26aa01"], ["0x26aa", 100, "0x26aa01", H]),
        ("state_queryStorageAt", [["0x01", "0x02"]], [["0x01", "0x02"], H]),
        ("state_getRuntimeVersion", [], [H]),
        ("state_getMetadata", [], [H]),
        ("childstate_getStorage", ["0xc", "0x01"], ["0xc", "0x01", H]),
    ],
)
def test_hash_optional_reads_without_a_hash_are_pinned(
    method: str, params: list[Any], pinned: list[Any]
) -> None:
    got = pin(Call(7, method, params), H)
    assert got is not None and got.params == pinned and got.id == 7
    assert got.facts.hash_at(HASH_POSITION[method]) == H  # now block-pinned


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("state_getStorage", ["0x01", OTHER]),  # already pinned
        ("state_getStorage", []),  # the key is missing: the node's error, unchanged
        ("state_getKeysPaged", ["0x26aa"]),  # count missing
        ("state_getStorage", {"key": "0x01"}),  # named params
        ("state_getStorage", ["0x01", None, "extra"]),  # more than it takes
        ("chain_getHeader", []),  # the head itself: how the head is learned
        ("chain_getBlock", []),
        ("chain_getBlockHash", []),
        ("system_health", []),
    ],
)
def test_what_is_never_pinned(method: str, params: Any) -> None:
    assert pin(Call(1, method, params), H) is None


def test_a_method_can_opt_out() -> None:
    assert pin(Call(1, "state_call", ["X", "0x"]), H, frozenset({"state_call"})) is None
    assert pin(Call(1, "state_getStorage", ["0x01"]), H, frozenset({"state_call"})) is not None


# --- head pinning: which head -----------------------------------------------------------------


def test_the_highest_header_seen_is_the_head_with_its_real_hash() -> None:
    book = HeadBook()
    assert book.learn("finney", header(10), now=0.0)
    assert book.get("finney").hash == header_hash(header(10))  # type: ignore[union-attr]
    assert not book.learn("finney", header(9), now=1.0)  # older: ignored
    assert book.learn("finney", header(11), now=2.0, block_hash=H)  # the hash asked for
    assert book.get("finney") is not None and book.get("finney").number == 11  # type: ignore[union-attr]
    assert book.get("test") is None  # per network
    assert not book.learn("finney", {"number": "0xzz"}, now=3.0)
    assert not book.learn("finney", None, now=3.0)


def test_a_head_is_used_only_while_fresh_and_not_behind_the_probes() -> None:
    book = HeadBook()
    book.learn("finney", header(100), now=10.0)
    assert book.fresh("finney", 20.0, max_age_s=30, probe_tip=100) is not None
    assert book.fresh("finney", 20.0, max_age_s=30, probe_tip=None) is not None
    assert book.fresh("finney", 41.0, max_age_s=30, probe_tip=100) is None  # too old
    assert book.fresh("finney", 20.0, max_age_s=30, probe_tip=101) is None  # probes saw more
    book.learn("finney", header(100), now=40.0)  # the same head, seen again: fresh again
    assert book.fresh("finney", 65.0, max_age_s=30, probe_tip=100) is not None


def test_a_reorg_at_the_same_height_replaces_the_head() -> None:
    book = HeadBook()
    book.learn("finney", header(5, parent=H), now=0.0)
    assert book.learn("finney", header(5, parent=OTHER), now=1.0)
    assert book.get("finney").hash == header_hash(header(5, parent=OTHER))  # type: ignore[union-attr]


def test_a_new_hash_shown_without_its_header_pauses_pinning_until_the_header() -> None:
    book = HeadBook()
    book.learn("finney", header(100), now=0.0)
    book.shown("finney", H.upper().replace("0X", "0x"), now=1.0, height=None)  # chain_getHead
    assert book.unseen("finney")
    assert book.fresh("finney", 2.0, max_age_s=30, probe_tip=100) is None
    assert not book.learn("finney", header(99), now=3.0)  # another block's header: still waiting
    assert book.fresh("finney", 3.0, max_age_s=30, probe_tip=100) is None
    assert book.learn("finney", header(101), now=4.0, block_hash=H)  # its header
    head = book.fresh("finney", 5.0, max_age_s=30, probe_tip=100)
    assert head is not None and head.hash == H and not book.unseen("finney")


def test_a_shown_hash_that_is_the_head_or_older_changes_nothing() -> None:
    book = HeadBook()
    book.learn("finney", header(100), now=0.0, block_hash=H)
    book.shown("finney", H, now=1.0, height=None)  # the head itself
    book.shown("finney", OTHER, now=1.0, height=99)  # chain_getBlockHash(99): older
    assert book.fresh("finney", 2.0, max_age_s=30, probe_tip=None) is not None
    book.shown("finney", OTHER, now=3.0, height=101)  # chain_getBlockHash(101): newer
    assert book.fresh("finney", 4.0, max_age_s=30, probe_tip=None) is None
    book.learn("finney", header(101), now=5.0)  # a header at that height: the head is there
    assert book.fresh("finney", 6.0, max_age_s=30, probe_tip=None) is not None


def test_a_shown_hash_that_was_older_or_never_explained_stops_pausing() -> None:
    book = HeadBook()
    book.learn("finney", header(100), now=0.0)
    book.shown("finney", OTHER, now=1.0, height=None)  # a lagging node's head, say
    book.learn("finney", header(98), now=2.0, block_hash=OTHER)  # it was #98
    assert book.fresh("finney", 2.0, max_age_s=30, probe_tip=100) is not None
    book.shown("finney", H, now=3.0, height=None)  # a header that never comes
    book.learn("finney", header(100), now=20.0)  # the head stays fresh meanwhile
    assert book.fresh("finney", 33.0, max_age_s=30, probe_tip=100) is None  # within max_age_s
    assert book.fresh("finney", 34.0, max_age_s=30, probe_tip=100) is not None  # then the tip
    assert not book.unseen("finney")


# --- coalescing --------------------------------------------------------------------------------


def _result(tag: str) -> ForwardResult:
    return ForwardResult("ok", ({"result": tag},), (), None)


def test_the_key_ignores_ids_and_keeps_everything_else() -> None:
    a = coalesce_key("finney", [Call(1, "state_call", ["X", "0x", H])], False)
    b = coalesce_key("finney", [Call("other", "state_call", ["X", "0x", H])], False)
    assert a == b
    assert a != coalesce_key("test", [Call(1, "state_call", ["X", "0x", H])], False)
    assert a != coalesce_key("finney", [Call(1, "state_call", ["X", "0x", OTHER])], False)
    assert a != coalesce_key("finney", [Call(1, "state_call", ["X", "0x", H])], True)


async def test_identical_calls_in_flight_share_one_upstream_call() -> None:
    co = Coalescer()
    started = 0
    gate = asyncio.Event()

    async def upstream() -> ForwardResult:
        nonlocal started
        started += 1
        await gate.wait()
        return _result("shared")

    waiters = [asyncio.ensure_future(co.run(b"k", upstream)) for _ in range(30)]
    await asyncio.sleep(0.01)
    gate.set()
    got = await asyncio.gather(*waiters)
    assert started == 1
    assert [shared for _, shared in got].count(False) == 1  # one sent it, 29 shared it
    assert all(r.answers == ({"result": "shared"},) for r, _ in got)
    assert len(co) == 0  # done: the next identical call goes upstream again
    await co.run(b"k", upstream)
    assert started == 2


async def test_a_call_after_the_answer_but_before_its_starter_resumed_joins_it() -> None:
    co = Coalescer()
    started = 0
    gate = asyncio.Event()

    async def upstream() -> ForwardResult:
        nonlocal started
        started += 1
        await gate.wait()
        return _result("z")

    first = asyncio.ensure_future(co.run(b"k", upstream))
    await asyncio.sleep(0)  # the starter sent it
    task = co._inflight[b"k"]
    gate.set()
    await task  # answered; the starter resumes (and stores the answer) after this test
    assert not first.done()
    result, shared = await co.run(b"k", upstream)  # not a second upstream call
    assert shared and started == 1 and result.answers == ({"result": "z"},)
    await first
    assert len(co) == 0


async def test_the_first_caller_leaving_does_not_cancel_the_others() -> None:
    co = Coalescer()
    gate = asyncio.Event()

    async def upstream() -> ForwardResult:
        await gate.wait()
        return _result("x")

    first = asyncio.ensure_future(co.run(b"k", upstream))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(co.run(b"k", upstream))
    await asyncio.sleep(0)
    first.cancel()  # its client closed the connection
    gate.set()
    result, shared = await second
    assert shared and result.answers == ({"result": "x"},)
    assert len(co) == 0  # the key went with the call, though its starter had left


async def test_a_failure_reaches_every_waiter_and_the_bound_holds() -> None:
    co = Coalescer(max_keys=1)

    async def broken() -> ForwardResult:
        await asyncio.sleep(0.01)
        raise RuntimeError("session closed")

    calls = 0

    async def fine() -> ForwardResult:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0.01)
        return _result("y")

    a = asyncio.ensure_future(co.run(b"a", broken))
    b = asyncio.ensure_future(co.run(b"a", broken))
    await asyncio.sleep(0)
    c1 = asyncio.ensure_future(co.run(b"c", fine))  # bound reached: not shared
    c2 = asyncio.ensure_future(co.run(b"c", fine))
    for f in (a, b):
        with pytest.raises(RuntimeError):
            await f
    assert [s for _, s in await asyncio.gather(c1, c2)] == [False, False] and calls == 2


# --- the hedge delay and budget ----------------------------------------------------------------


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


# --- racing in the forward loop ----------------------------------------------------------------


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
