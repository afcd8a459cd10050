"""Forwarding with failover (the attempt loop, per-attempt timeout, deadline) through an
in-process fake transport and a fake clock: no sockets, no real sleeping."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from typing import Any

import pytest

from addon.rpc.jsonrpc import Call
from addon.upstream.forward import Budget, ForwardResult, TransportError, forward, outbound_body
from addon.upstream.pool import TIER_LAGGING, TIER_SYNCED, TIER_UNPROBED, Upstream, UpstreamPool
from tests.fakes import FakeClock

HASH = "0x" + "ab" * 32
DISCARDED = "State already discarded for 0x" + "12" * 32


Responder = Callable[[Any], tuple[int, bytes]]
# one scripted step: (seconds the upstream takes, what it does)
Step = tuple[float, "str | Responder | BaseException"]


class FakeTransport:
    """Answers per URL from a script; the clock moves by the simulated latency,
    or by the timeout when the upstream is slower than that."""

    def __init__(self, clock: FakeClock, script: dict[str, list[Step]]) -> None:
        self.clock = clock
        self.script = script
        self.calls: list[tuple[str, bytes, float]] = []

    async def post(self, url: str, body: bytes, timeout: float) -> tuple[int, bytes]:
        self.calls.append((url, body, timeout))
        steps = self.script[url]
        delay, action = steps.pop(0) if len(steps) > 1 else steps[0]
        if delay > timeout:
            self.clock.t += timeout
            raise TransportError("timeout")
        self.clock.t += delay
        if isinstance(action, BaseException):
            raise action
        if isinstance(action, str):
            raise TransportError(action)
        return action(json.loads(body))

    def urls(self) -> list[str]:
        return [u for u, _, _ in self.calls]


def _each(doc: Any, make: Callable[[int], dict[str, Any]]) -> bytes:
    if isinstance(doc, list):
        return json.dumps([make(o["id"]) for o in doc]).encode()
    return json.dumps(make(doc["id"])).encode()


def ok(result: Any) -> Responder:
    return lambda doc: (200, _each(doc, lambda i: {"jsonrpc": "2.0", "id": i, "result": result}))


def rpc_error(code: int | None, message: str) -> Responder:
    def make(i: int) -> dict[str, Any]:
        e: dict[str, Any] = {"message": message}
        if code is not None:
            e["code"] = code
        return {"jsonrpc": "2.0", "id": i, "error": e}

    return lambda doc: (200, _each(doc, make))


def http(status: int, body: bytes = b"<html>oops</html>") -> Responder:
    return lambda doc: (status, body)


def url(name: str) -> str:
    return f"http://{name}.example:9944/rpc"


def up(name: str, tier: int = TIER_SYNCED, *, archive: bool = False, ewma: float = 0.0) -> Upstream:
    u = Upstream(id=f"endpoint-srf-{name}", url=url(name), provider=f"prov-{name}", archive=archive)
    u.tier = tier
    u.ewma_ms = ewma
    u.updated_at = 5000.0 if ewma else 0.0
    return u


def setup(
    *ups: Upstream,
    script: dict[str, list[Step]],
    eject_after: int = 3,
) -> tuple[UpstreamPool, FakeTransport, FakeClock]:
    clock = FakeClock(5000.0)
    p = UpstreamPool(
        ups, eject_after=eject_after, eject_cooldown_s=30.0, clock=clock, rng=random.Random(3)
    )
    return p, FakeTransport(clock, {url(k): v for k, v in script.items()}), clock


BUDGET = Budget(max_attempts=3, attempt_timeout_s=5.0, deadline_s=15.0)
HEADER_CALL = [Call("caller-id", "chain_getHeader", [])]


async def run(
    p: UpstreamPool,
    t: FakeTransport,
    clock: FakeClock,
    calls: list[Call] | None = None,
    *,
    is_batch: bool = False,
    budget: Budget = BUDGET,
    tip: int | None = None,
) -> ForwardResult:
    return await forward(
        calls or HEADER_CALL,
        is_batch=is_batch,
        pool=p,
        transport=t,
        budget=budget,
        clock=clock,
        tip=tip,
    )


# --- failover ------------------------------------------------------------------------------


async def test_first_upstream_dead_second_answers() -> None:
    a, b = up("a"), up("b", TIER_LAGGING)
    p, t, clock = setup(a, b, script={"a": [(0.01, "connect-error")], "b": [(0.2, ok("0x1"))]})
    r = await run(p, t, clock)
    assert r.kind == "ok"
    assert r.failover is True
    assert r.answers == ({"jsonrpc": "2.0", "id": 0, "result": "0x1"},)
    assert r.upstream is b
    assert [(x.endpoint, x.outcome, x.reason) for x in r.attempts] == [
        (a.id, "hard", "connect-error"),
        (b.id, "ok", ""),
    ]
    assert [x.as_dict()["reason"] for x in r.attempts] == ["connect-error", "ok"]
    assert r.attempts[1].latency_ms == 200
    assert a.consecutive_failures == 1 and b.consecutive_failures == 0
    assert a.inflight == 0 and b.inflight == 0


async def test_attempts_never_show_the_url() -> None:
    a = Upstream(
        id="endpoint-srf-x",
        url="https://n.example/rpc?apikey=SECRET99",
        provider="p",
        archive=False,
    )
    p, t, clock = setup(a, script={})
    t.script = {a.url: [(0.0, "connect-error")]}
    r = await run(p, t, clock)
    assert r.kind == "failed"
    assert "SECRET99" not in json.dumps([x.as_dict() for x in r.attempts])


async def test_no_failover_when_the_first_answer_is_good() -> None:
    a, b = up("a"), up("b", TIER_LAGGING)
    p, t, clock = setup(a, b, script={"a": [(0.01, ok("0x1"))], "b": [(0.01, ok("0x2"))]})
    r = await run(p, t, clock)
    assert r.kind == "ok" and r.failover is False
    assert t.urls() == [url("a")]


async def test_all_dead_fails_with_every_attempt() -> None:
    a, b, c = up("a"), up("b", TIER_LAGGING), up("c", TIER_UNPROBED)
    p, t, clock = setup(
        a,
        b,
        c,
        script={
            "a": [(0.01, "connect-error")],
            "b": [(0.1, http(503))],
            "c": [(0.1, http(200, b"<html>not json</html>"))],
        },
    )
    r = await run(p, t, clock)
    assert r.kind == "failed"
    assert r.answers is None and r.upstream is None
    assert [(x.endpoint, x.outcome, x.reason) for x in r.attempts] == [
        (a.id, "hard", "connect-error"),
        (b.id, "hard", "http-503"),
        (c.id, "hard", "invalid-body"),
    ]


async def test_at_most_max_attempts_distinct_upstreams() -> None:
    ups = [up(f"n{i}") for i in range(6)]
    p, t, clock = setup(*ups, script={f"n{i}": [(0.01, http(502))] for i in range(6)})
    r = await run(p, t, clock)
    assert r.kind == "failed"
    assert len(r.attempts) == 3 and len(t.calls) == 3
    assert len({x.endpoint for x in r.attempts}) == 3
    assert len(set(t.urls())) == 3


async def test_fewer_upstreams_than_attempts_tries_each_once() -> None:
    a, b = up("a"), up("b")
    p, t, clock = setup(a, b, script={"a": [(0.01, "reset")], "b": [(0.01, "reset")]})
    r = await run(p, t, clock, budget=Budget(5, 5.0, 15.0))
    assert r.kind == "failed"
    assert sorted(t.urls()) == [url("a"), url("b")]


async def test_soft_answer_then_ok_gives_ok() -> None:
    a, b = up("a"), up("b", TIER_LAGGING)
    p, t, clock = setup(a, b, script={"a": [(0.01, ok(None))], "b": [(0.01, ok(HASH))]})
    calls = [Call(1, "chain_getBlockHash", [100])]
    r = await run(p, t, clock, calls, tip=200)
    assert r.kind == "ok"
    assert r.answers == ({"jsonrpc": "2.0", "id": 0, "result": HASH},)
    assert [(x.outcome, x.reason) for x in r.attempts] == [("soft", "null-lagging"), ("ok", "")]
    assert r.upstream is b
    assert a.consecutive_failures == 0  # a lagging node is not a failing node


async def test_soft_everywhere_gives_the_last_soft_answer() -> None:
    a, b, c = up("a"), up("b", TIER_LAGGING), up("c", TIER_UNPROBED)
    p, t, clock = setup(
        a,
        b,
        c,
        script={
            "a": [(0.01, rpc_error(4003, DISCARDED + " (a)"))],
            "b": [(0.01, rpc_error(4003, DISCARDED + " (b)"))],
            "c": [(0.01, rpc_error(4003, DISCARDED + " (c)"))],
        },
    )
    calls = [Call("q", "state_getStorage", ["0x26aa", HASH])]
    r = await run(p, t, clock, calls)
    assert r.kind == "soft"
    assert len(r.attempts) == 3
    assert all(x.outcome == "soft" for x in r.attempts)
    assert r.upstream is c
    assert r.answers is not None
    assert r.answers[0]["error"]["message"].endswith("(c)")


async def test_hash_pinned_null_only_when_every_upstream_says_so() -> None:
    a, b = up("a"), up("b", TIER_LAGGING)
    p, t, clock = setup(a, b, script={"a": [(0.01, ok(None))], "b": [(0.01, ok(None))]})
    r = await run(p, t, clock, [Call(1, "chain_getBlock", [HASH])])
    assert r.kind == "soft"
    assert len(r.attempts) == 2
    assert r.answers == ({"jsonrpc": "2.0", "id": 0, "result": None},)


async def test_soft_answer_then_dead_upstreams_gives_the_soft_answer() -> None:
    a, b = up("a"), up("b", TIER_LAGGING)
    p, t, clock = setup(a, b, script={"a": [(0.01, ok(None))], "b": [(0.01, "connect-error")]})
    r = await run(p, t, clock, [Call(1, "chain_getBlockHash", [10])], tip=20)
    assert r.kind == "soft"
    assert r.upstream is a
    assert r.answers == ({"jsonrpc": "2.0", "id": 0, "result": None},)


async def test_state_discarded_goes_to_the_archive_next() -> None:
    fast = up("fast", ewma=5.0)
    slow = up("slow", ewma=500.0)  # synced, non-archive: would be next without the preference
    archive = up("archive", TIER_LAGGING, archive=True)
    p, t, clock = setup(
        fast,
        slow,
        archive,
        script={
            "fast": [(0.01, rpc_error(4003, DISCARDED))],
            "slow": [(0.01, rpc_error(4003, DISCARDED))],
            "archive": [(0.3, ok("0x00"))],
        },
    )
    calls = [Call(9, "state_getStorage", ["0x26aa", HASH])]
    r = await run(p, t, clock, calls)
    assert t.urls() == [url("fast"), url("archive")]
    assert r.kind == "ok" and r.upstream is archive
    assert [x.reason for x in r.attempts] == ["state-discarded", ""]


async def test_deterministic_upstream_error_is_returned_after_one_attempt() -> None:
    a, b = up("a"), up("b")
    invalid = rpc_error(-32602, "Invalid params: expected u32")
    p, t, clock = setup(a, b, script={"a": [(0.01, invalid)], "b": [(0.01, invalid)]})
    r = await run(p, t, clock, [Call(1, "chain_getBlockHash", ["x"])])
    assert r.kind == "ok"
    assert len(t.calls) == 1 and len(r.attempts) == 1
    assert r.answers is not None
    assert r.answers[0]["error"] == {"code": -32602, "message": "Invalid params: expected u32"}


async def test_method_not_found_without_code_is_not_retried() -> None:
    a, b = up("a"), up("b")
    nf = rpc_error(None, "Method not found: subnetInfo_getDynamicInfo")
    p, t, clock = setup(a, b, script={"a": [(0.01, nf)], "b": [(0.01, nf)]})
    r = await run(p, t, clock, [Call(1, "subnetInfo_getDynamicInfo", [1])])
    assert r.kind == "ok" and len(t.calls) == 1


async def test_batch_with_a_hard_item_fails_over_as_a_whole() -> None:
    a, b = up("a"), up("b", TIER_LAGGING)

    def half_broken(doc: Any) -> tuple[int, bytes]:
        return 200, json.dumps(
            [
                {"jsonrpc": "2.0", "id": 0, "result": "0x1"},
                {"jsonrpc": "2.0", "id": 1, "error": {"code": -32603, "message": "Internal"}},
            ]
        ).encode()

    p, t, clock = setup(a, b, script={"a": [(0.01, half_broken)], "b": [(0.01, ok("0x2"))]})
    calls = [Call("x", "chain_getHeader", []), Call("y", "system_health", [])]
    r = await run(p, t, clock, calls, is_batch=True)
    assert r.kind == "ok" and r.upstream is b
    assert r.answers is not None and [x["result"] for x in r.answers] == ["0x2", "0x2"]


# --- deadline and per-attempt timeout --------------------------------------------------------


async def test_deadline_stops_attempts() -> None:
    ups = [up(f"n{i}") for i in range(5)]
    p, t, clock = setup(*ups, script={f"n{i}": [(100.0, ok("late"))] for i in range(5)})
    start = clock.t
    r = await run(p, t, clock, budget=Budget(5, 5.0, 12.0))
    assert r.kind == "deadline"
    assert r.answers is None
    assert [x.reason for x in r.attempts] == ["timeout", "timeout", "timeout"]
    assert [timeout for _, _, timeout in t.calls] == [5.0, 5.0, pytest.approx(2.0)]
    assert clock.t - start == pytest.approx(12.0)  # never past the deadline


async def test_deadline_passed_by_slow_failures() -> None:
    ups = [up(f"n{i}") for i in range(5)]
    p, t, clock = setup(*ups, script={f"n{i}": [(6.0, http(503))] for i in range(5)})
    start = clock.t
    r = await run(p, t, clock, budget=Budget(5, 6.0, 12.0))
    assert r.kind == "deadline"
    assert len(r.attempts) == 2
    assert clock.t - start == pytest.approx(12.0)


async def test_per_attempt_timeout_then_failover() -> None:
    a, b = up("a"), up("b", TIER_LAGGING)
    p, t, clock = setup(a, b, script={"a": [(30.0, ok("late"))], "b": [(0.5, ok("0x2"))]})
    start = clock.t
    r = await run(p, t, clock)
    assert r.kind == "ok" and r.upstream is b
    assert [x.reason for x in r.attempts] == ["timeout", ""]
    assert r.attempts[0].latency_ms == 5000
    assert clock.t - start == pytest.approx(5.5)


async def test_soft_answer_survives_the_deadline() -> None:
    a, b = up("a"), up("b", TIER_LAGGING)
    p, t, clock = setup(a, b, script={"a": [(1.0, ok(None))], "b": [(100.0, ok(HASH))]})
    r = await run(p, t, clock, [Call(1, "chain_getBlock", [HASH])], budget=Budget(3, 5.0, 3.0))
    assert r.kind == "soft"
    assert r.answers == ({"jsonrpc": "2.0", "id": 0, "result": None},)


async def test_no_upstream() -> None:
    p, t, clock = setup(script={})
    r = await run(p, t, clock)
    assert r.kind == "no-upstream"
    assert r.attempts == () and r.answers is None and r.upstream is None
    assert t.calls == []


# --- pool feedback --------------------------------------------------------------------------


async def test_dead_upstream_is_ejected_and_skipped_then_retried_after_cooldown() -> None:
    a, b = up("a"), up("b", TIER_LAGGING)
    p, t, clock = setup(a, b, script={"a": [(0.01, "connect-error")], "b": [(0.01, ok("0x1"))]})
    for _ in range(3):
        r = await run(p, t, clock)
        assert r.kind == "ok" and len(r.attempts) == 2
    t.calls.clear()
    r = await run(p, t, clock)
    assert r.kind == "ok" and len(r.attempts) == 1  # a is ejected: no wasted attempt
    assert t.urls() == [url("b")]
    clock.t += 30.0
    t.calls.clear()
    await run(p, t, clock)
    assert t.urls()[0] == url("a")  # cool-down over: tried again


@pytest.mark.parametrize(
    "exc", [asyncio.CancelledError(), RuntimeError("Session is closed")], ids=repr
)
async def test_an_aborted_forward_does_not_leak_in_flight_count(exc: BaseException) -> None:
    a = up("a")
    p, t, clock = setup(a, script={"a": [(0.01, exc)]})
    with pytest.raises(type(exc)):
        await run(p, t, clock)
    assert a.inflight == 0


# --- outbound body --------------------------------------------------------------------------


async def test_outbound_batch_renumbers_ids() -> None:
    a = up("a")
    p, t, clock = setup(a, script={"a": [(0.01, ok(1))]})
    calls = [
        Call("dup", "chain_getHeader", []),
        Call(None, "chain_getBlockHash", [5]),
        Call(7.5, "state_getStorage", {"key": "0x26aa"}),
        Call("dup", "system_health", []),
    ]
    r = await run(p, t, clock, calls, is_batch=True)
    sent = t.calls[0][1]
    assert sent == outbound_body(calls, True)
    doc = json.loads(sent)
    assert [o["id"] for o in doc] == [0, 1, 2, 3]
    assert [o["method"] for o in doc] == [c.method for c in calls]
    assert [o["params"] for o in doc] == [c.params for c in calls]
    assert all(o["jsonrpc"] == "2.0" for o in doc)
    assert r.kind == "ok" and r.answers is not None and len(r.answers) == 4


async def test_outbound_single_is_an_object_with_id_zero() -> None:
    a = up("a")
    p, t, clock = setup(a, script={"a": [(0.01, ok(1))]})
    await run(p, t, clock, [Call("caller-\u00fc", "chain_getBlockHash", ["0x10"])])
    sent = json.loads(t.calls[0][1])
    assert sent == {"jsonrpc": "2.0", "id": 0, "method": "chain_getBlockHash", "params": ["0x10"]}
    assert t.calls[0][1] == outbound_body([Call("x", "chain_getBlockHash", ["0x10"])], False)


async def test_the_same_body_goes_to_every_attempt() -> None:
    a, b = up("a"), up("b", TIER_LAGGING)
    p, t, clock = setup(a, b, script={"a": [(0.01, http(500))], "b": [(0.01, ok(1))]})
    await run(p, t, clock)
    assert len(t.calls) == 2 and t.calls[0][1] == t.calls[1][1]


# --- big answers give the loop back -----------------------------------------------------


@pytest.mark.parametrize(("size", "judged_first"), [(40_000, False), (100, True)])
async def test_a_big_answer_is_judged_after_the_calls_waiting_behind_it(
    size: int, judged_first: bool
) -> None:
    """A callback made ready as a big answer arrives (a small call read
    meanwhile) runs before the answer is judged, not after its whole handling;
    a small answer is judged in the same turn."""
    a = up("a")
    seen: list[int] = []

    def respond(doc: Any) -> tuple[int, bytes]:
        asyncio.get_running_loop().call_soon(lambda: seen.append(a.inflight))
        return ok("0x" + "ab" * size)(doc)

    p, t, clock = setup(a, script={"a": [(0.01, respond)]})
    r = await run(p, t, clock)
    await asyncio.sleep(0)  # whatever is ready by now has run
    assert r.kind == "ok" and r.body_bytes > 2 * size
    assert seen == [0 if judged_first else 1]  # 1: still in flight, not judged yet
