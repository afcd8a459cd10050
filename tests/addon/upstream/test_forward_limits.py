"""Forwarding with the nodes' limits: a 429 (or a 503 with Retry-After) fails
over as before, and the node then pauses and, without a configured budget,
learns one; when every node's budget is spent the call is shed with a time to
retry. In-process fake transport, fake clock."""

from __future__ import annotations

import json
from typing import Any

from addon.rpc.jsonrpc import Call
from addon.upstream.admission import Admission
from addon.upstream.budgets import Budgets, Ticket
from addon.upstream.fair_wait import FairWait
from addon.upstream.forward import TransportError, forward
from addon.upstream.pool import UpstreamPool
from common.config import Endpoint
from tests.addon.upstream.test_forward import (
    BUDGET,
    FakeTransport,
    http,
    ok,
    rpc_error,
    setup,
    up,
    url,
)
from tests.fakes import FakeClock

CALL = [Call(1, "chain_getHeader", [])]


def _admission(pool: UpstreamPool, clock: FakeClock, **budgets: int) -> Admission:
    eps = [
        Endpoint(url=u.url, provider="p", kind="rpc-http", network="finney", id=u.id, **budgets)
        for u in pool.upstreams.values()
    ]
    return Admission(Budgets(eps, clock=clock), FairWait(), client="c", max_wait_s=0.0, clock=clock)


async def _run(pool: UpstreamPool, t: FakeTransport, clock: FakeClock, adm: Admission):  # type: ignore[no-untyped-def]
    return await forward(
        CALL, is_batch=False, pool=pool, transport=t, budget=BUDGET, clock=clock, admission=adm
    )


async def test_a_429_fails_over_and_the_node_pauses() -> None:
    a, b = up("a", ewma=1.0), up("b", ewma=50.0)
    pool, t, clock = setup(a, b, script={"a": [(0.01, http(429, b""))], "b": [(0.02, ok("0x1"))]})
    adm = _admission(pool, clock)
    r = await _run(pool, t, clock, adm)
    assert r.kind == "ok" and r.upstream is b
    assert [x.reason for x in r.attempts] == ["rate-limited", ""]
    assert a.backoff_until > clock.t and a.consecutive_failures == 0
    # one call is no rate to learn from (LEARN_MIN_SEEN): the pause alone answers it
    assert adm.budgets.node(a.id).learned_rps is None  # type: ignore[attr-defined]
    # while it pauses, the next calls go to b only
    t.calls.clear()
    for _ in range(5):
        assert (await _run(pool, t, clock, adm)).upstream is b
    assert t.urls() == [b.url] * 5


async def test_a_rate_limit_error_in_the_body_counts_as_429() -> None:
    a, b = up("a", ewma=1.0), up("b", ewma=50.0)
    script = {"a": [(0.01, rpc_error(-32029, "Too many requests"))], "b": [(0.02, ok("0x1"))]}
    pool, t, clock = setup(a, b, script=script)
    r = await _run(pool, t, clock, _admission(pool, clock))
    assert r.kind == "ok" and a.backoff_until > clock.t


async def test_retry_after_sets_the_pause() -> None:
    a, b = up("a", ewma=1.0), up("b", ewma=50.0)
    script = {
        "a": [(0.01, TransportError("http-503", retry_after=42.0))],
        "b": [(0.02, ok("0x1"))],
    }
    pool, t, clock = setup(a, b, script=script)
    r = await _run(pool, t, clock, _admission(pool, clock))
    assert r.kind == "ok"
    assert a.backoff_until - clock.t > 41.0 and a.backoff_reason == "http-503"


async def test_without_admission_a_429_is_a_plain_failure_as_before() -> None:
    a, b = up("a", ewma=1.0), up("b", ewma=50.0)
    pool, t, clock = setup(a, b, script={"a": [(0.01, http(429, b""))], "b": [(0.02, ok("0x1"))]})
    r = await forward(CALL, is_batch=False, pool=pool, transport=t, budget=BUDGET, clock=clock)
    assert r.kind == "ok" and a.backoff_until == 0.0 and a.consecutive_failures == 1


async def test_every_budget_spent_is_shed_not_sent() -> None:
    a = up("a")
    pool, t, clock = setup(a, script={"a": [(0.01, ok("0x1"))]})
    adm = _admission(pool, clock, max_concurrency=1)
    assert isinstance(adm.budgets.try_take(a.id, 1), Ticket)
    r = await _run(pool, t, clock, adm)
    assert r.kind == "capacity" and r.retry_after >= 1
    assert t.calls == []  # never a call past the budget


async def test_the_budget_is_given_back_when_the_call_ends() -> None:
    a = up("a")
    pool, t, clock = setup(a, script={"a": [(0.01, ok("0x1")), (0.01, "connect-error")]})
    adm = _admission(pool, clock, max_concurrency=1)
    assert (await _run(pool, t, clock, adm)).kind == "ok"
    assert adm.budgets.node(a.id).inflight == 0  # type: ignore[attr-defined]
    assert (await _run(pool, t, clock, adm)).kind == "failed"
    assert adm.budgets.node(a.id).inflight == 0  # type: ignore[attr-defined]


async def test_a_pinned_call_stops_at_the_first_node_without_the_block() -> None:
    """The proxy's own pin: no other node is tried with it (the caller unpins)."""
    unknown = rpc_error(-32000, "Client error: UnknownBlock: Header was not found in the database")
    a, b = up("a", ewma=1.0), up("b", ewma=50.0)
    pool, t, clock = setup(a, b, script={"a": [(0.01, unknown)], "b": [(0.02, ok("0x1"))]})
    r = await forward(
        CALL,
        is_batch=False,
        pool=pool,
        transport=t,
        budget=BUDGET,
        clock=clock,
        pinned=frozenset({0}),
    )
    assert r.kind == "soft" and r.pin_missed and len(t.calls) == 1
    # the client's own hash (not pinned by the proxy): failed over as before
    pool, t, clock = setup(a, b, script={"a": [(0.01, unknown)], "b": [(0.02, ok("0x1"))]})
    r = await forward(CALL, is_batch=False, pool=pool, transport=t, budget=BUDGET, clock=clock)
    assert r.kind == "ok" and not r.pin_missed and len(t.calls) == 2


async def test_in_a_batch_only_a_pinned_items_miss_is_a_miss_of_the_pin() -> None:
    """Item 0 was pinned by the proxy, item 1 asks a hash the client sent. A
    node that does not know the client's hash fails over as without pinning;
    a node that does not know the proxy's is a miss of the pin (the caller
    sends the batch again unpinned): the client's unknown hash is not blamed
    on the pin."""
    h1, h2 = "0x" + "11" * 32, "0x" + "22" * 32
    batch = [Call(1, "state_getStorage", ["0x01", h1]), Call(2, "state_getStorage", ["0x02", h2])]
    unknown = {"code": -32000, "message": "Client error: UnknownBlock: Header was not found"}

    def answering(missing: int) -> Any:
        def answer(doc: Any) -> tuple[int, bytes]:
            out = [
                {"jsonrpc": "2.0", "id": d["id"], "error": unknown}
                if d["id"] == missing
                else {"jsonrpc": "2.0", "id": d["id"], "result": "0x05"}
                for d in doc
            ]
            return 200, json.dumps(out).encode()

        return answer

    a, b = up("a", ewma=1.0), up("b", ewma=50.0)
    for missing, pin_missed in ((1, False), (0, True)):
        script = {"a": [(0.01, answering(missing))], "b": [(0.02, ok("0x05"))]}
        pool, t, clock = setup(a, b, script=script)
        r = await forward(
            batch, is_batch=True, pool=pool, transport=t, budget=BUDGET, clock=clock,
            pinned=frozenset({0}),
        )  # fmt: skip
        assert r.pin_missed is pin_missed
        # the client's own hash: the next node; the proxy's: stop, the caller unpins
        assert len(t.calls) == (1 if pin_missed else 2)
        assert r.kind == ("soft" if pin_missed else "ok")


async def test_every_node_saying_too_many_is_capacity_not_a_failure() -> None:
    a, b = up("a", ewma=1.0), up("b", ewma=50.0)
    script = {
        "a": [(0.01, http(429, b""))],
        "b": [(0.01, TransportError("rate-limited", retry_after=7.0))],
    }
    pool, t, clock = setup(a, b, script=script)
    r = await _run(pool, t, clock, _admission(pool, clock))
    assert r.kind == "capacity" and 1 <= r.retry_after <= 7  # when the first is back
    assert [x.reason for x in r.attempts] == ["rate-limited", "rate-limited"]
    # without the limits: a failure, as before
    pool, t, clock = setup(up("a", ewma=1.0), up("b", ewma=50.0), script=script)
    r = await forward(CALL, is_batch=False, pool=pool, transport=t, budget=BUDGET, clock=clock)
    assert r.kind == "failed"


async def test_capacity_is_back_soon_when_a_node_that_refused_is_paced_not_paused() -> None:
    """b refused without Retry-After and learned a rate (not paused: it takes
    calls again within the second); a paused itself for 10 s. The time to
    retry is b's (1 s), not a's pause (before: 10 s)."""
    a, b = up("a", ewma=50.0), up("b", ewma=1.0)
    pool, t, clock = setup(a, b, script={"a": [(0.01, ok("0x1"))], "b": [(0.001, ok("0x1"))]})
    adm = _admission(pool, clock)
    for _ in range(10):  # ten calls to b within the second: a 429 then teaches it a rate
        assert (await _run(pool, t, clock, adm)).upstream is b
    t.script[b.url] = [(0.001, http(429, b""))]
    t.script[a.url] = [(0.01, TransportError("rate-limited", retry_after=10.0))]
    r = await _run(pool, t, clock, adm)
    assert r.kind == "capacity" and [x.endpoint for x in r.attempts] == [b.id, a.id]
    assert b.backoff_until <= clock.t < a.backoff_until - 9  # b paced, a paused
    assert r.retry_after == 1
    assert pool.back_in({b.id, a.id}) is None and pool.back_in({a.id}) is not None


async def test_every_node_answering_503_is_still_the_contracts_502() -> None:
    """A 503 with Retry-After pauses the node, but a node failing is a failure."""
    a, b = up("a", ewma=1.0), up("b", ewma=50.0)
    script = {
        "a": [(0.01, TransportError("http-503", retry_after=1.0))],
        "b": [(0.01, TransportError("http-503", retry_after=1.0))],
    }
    pool, t, clock = setup(a, b, script=script)
    r = await _run(pool, t, clock, _admission(pool, clock))
    assert r.kind == "failed" and a.backoff_until > clock.t and b.backoff_until > clock.t


WORK_LIMIT = rpc_error(-32004, "RPC work limit exceeded")
KEYS = [Call(1, "state_getKeysPaged", ["0x26aa", 10])]


async def test_a_nodes_work_limit_fails_over_and_the_node_pauses() -> None:
    """A node's limit said inside a 200 (not the client's answer): another node
    answers within the same call, and the node gets no client call meanwhile."""
    a, b = up("a", ewma=1.0), up("b", ewma=50.0)
    pool, t, clock = setup(a, b, script={"a": [(0.01, WORK_LIMIT)], "b": [(0.02, ok(["0x1"]))]})
    adm = _admission(pool, clock)
    r = await forward(
        KEYS, is_batch=False, pool=pool, transport=t, budget=BUDGET, clock=clock, admission=adm
    )
    assert (
        r.kind == "ok"
        and r.upstream is b
        and r.answers == ({"jsonrpc": "2.0", "id": 0, "result": ["0x1"]},)
    )
    assert [x.reason for x in r.attempts] == ["work-limited", ""]
    assert a.backoff_until > clock.t and a.backoff_reason == "work-limited"
    assert a.consecutive_failures == 0  # a limit, not a failure: never ejected for it


async def test_a_work_limit_teaches_the_node_a_lower_rate() -> None:
    """As a 429 does: the node was sent calls in the last second, then refused."""
    a, b = up("a", ewma=1.0), up("b", ewma=50.0)
    pool, t, clock = setup(a, b, script={"a": [(0.001, ok("0x1"))], "b": [(0.02, ok("0x1"))]})
    adm = _admission(pool, clock)
    for _ in range(10):  # ten calls to a within the second
        assert (await _run(pool, t, clock, adm)).upstream is a
    budgets: Budgets = adm.budgets  # type: ignore[assignment]
    assert budgets.node(a.id).learned_rps is None
    t.script[a.url] = [(0.001, WORK_LIMIT)]
    r = await _run(pool, t, clock, adm)
    assert r.kind == "ok" and r.upstream is b
    learned = budgets.node(a.id).learned_rps
    assert learned is not None and learned < 10


async def test_every_node_at_its_work_limit_is_capacity_with_a_time_to_retry() -> None:
    a, b, c = up("a", ewma=1.0), up("b", ewma=50.0), up("c", ewma=90.0)
    script = {"a": [(0.01, WORK_LIMIT)], "b": [(0.01, WORK_LIMIT)], "c": [(0.01, WORK_LIMIT)]}
    pool, t, clock = setup(a, b, c, script=script)
    r = await _run(pool, t, clock, _admission(pool, clock))
    assert r.kind == "capacity" and r.answers is None and r.retry_after >= 1
    assert [x.reason for x in r.attempts] == ["work-limited"] * 3
    # one node that answers is enough
    a, b, c = up("a", ewma=1.0), up("b", ewma=50.0), up("c", ewma=90.0)
    pool, t, clock = setup(a, b, c, script={**script, "c": [(0.01, ok("0x1"))]})
    r = await _run(pool, t, clock, _admission(pool, clock))
    assert r.kind == "ok" and r.upstream is c and len(r.attempts) == 3


def _refuses_item(n: int) -> Any:
    """A batch answered but for item ``n``, refused for the node's limits."""

    def answer(doc: Any) -> tuple[int, bytes]:
        out = [
            {
                "jsonrpc": "2.0",
                "id": o["id"],
                "error": {"code": -32004, "message": "RPC work limit exceeded"},
            }
            if o["id"] == n
            else {"jsonrpc": "2.0", "id": o["id"], "result": f"0x{o['id']}"}
            for o in doc
        ]
        return 200, json.dumps(out).encode()

    return answer


BATCH = [Call(1, "system_health", []), Call(2, "state_getKeysPaged", ["0x26aa", 10])]


async def test_a_batch_with_a_refused_item_goes_whole_to_another_node() -> None:
    """One node's answer to a batch is one view of the chain: a node that
    refused an item for its limits is not mixed with another's answers."""
    a, b = up("a", ewma=1.0), up("b", ewma=50.0)
    pool, t, clock = setup(a, b, script={"a": [(0.01, _refuses_item(1))], "b": [(0.02, ok("0xb"))]})
    r = await forward(
        BATCH, is_batch=True, pool=pool, transport=t, budget=BUDGET, clock=clock,
        admission=_admission(pool, clock),
    )  # fmt: skip
    assert r.kind == "ok" and r.upstream is b
    assert r.answers is not None and [x["result"] for x in r.answers] == ["0xb", "0xb"]


async def test_a_batch_item_every_node_refused_is_the_only_one_refused() -> None:
    a, b = up("a", ewma=1.0), up("b", ewma=50.0)
    script = {"a": [(0.01, _refuses_item(1))], "b": [(0.02, _refuses_item(1))]}
    pool, t, clock = setup(a, b, script=script)
    r = await forward(
        BATCH, is_batch=True, pool=pool, transport=t, budget=BUDGET, clock=clock,
        admission=_admission(pool, clock),
    )  # fmt: skip
    assert r.kind == "capacity" and r.retry_after >= 1 and r.upstream is b
    assert r.answers is not None
    assert r.answers[0]["result"] == "0x0" and r.answers[1]["error"]["code"] == -32004


async def test_a_pin_missed_is_tried_once_on_another_node_known_at_its_height() -> None:
    """A node the proxy believed at the pinned head (its best, as last seen,
    at that height) did not know it: one other node known to be there is
    asked with the pin, so the answer is not older than the head the proxy
    has shown (a correctness review saw 12 of 3,112 reads go back 3 blocks
    when the fallback went unpinned to the lagging node). A second miss, or
    no other node known at the height: the caller unpins, as before."""
    unknown = rpc_error(-32000, "Client error: UnknownBlock: Header was not found in the database")
    for b_best, b_answer, calls, kind, missed in (
        (100, ok("0x1"), 2, "ok", False),  # the other node holds it: answered pinned
        (100, unknown, 2, "soft", True),  # it does not either: unpinned by the caller
        (99, ok("0x1"), 1, "soft", True),  # none known at the height: at once, as before
    ):
        a, b, c = up("a", ewma=1.0), up("b", ewma=50.0), up("c", ewma=90.0)
        a.best, b.best, c.best = 100, b_best, 98
        script = {"a": [(0.01, unknown)], "b": [(0.02, b_answer)], "c": [(0.02, ok("0x2"))]}
        pool, t, clock = setup(a, b, c, script=script)
        r = await forward(
            CALL, is_batch=False, pool=pool, transport=t, budget=BUDGET, clock=clock,
            pinned=frozenset({0}), min_block=100,
        )  # fmt: skip
        assert (len(t.calls), r.kind, r.pin_missed) == (calls, kind, missed)
        assert url("c") not in t.urls()  # a node behind the pin is never asked with it


async def test_an_upstream_batch_with_no_room_at_once_is_not_sent_nor_waited_for() -> None:
    """A node at 2 calls a second and a batch of 3: an upstream batch
    (``split``) is counted whole and, with no room for it now, handed back
    unsent at once for its calls to take their turns alone (a batch let past a
    rate set 429s off at the nodes: scenario 14 at 8 calls/s, 29 % errors
    against 18 %); a client's own batch, which cannot be split, is let through
    as before (counted up to the rate, so it never starves)."""
    a = up("a", ewma=1.0)
    calls = [Call(i, "state_getStorage", [f"0x0{i}"]) for i in range(3)]
    for split, sent in ((True, 0), (False, 1)):
        pool, t, clock = setup(a, script={"a": [(0.01, ok("0x1"))]})
        adm = _admission(pool, clock, max_rps=2)
        r = await forward(
            calls, is_batch=True, pool=pool, transport=t, budget=BUDGET, clock=clock,
            admission=adm, split=split,
        )  # fmt: skip
        assert len(r.attempts) == len(t.calls) == sent
        assert r.kind == ("no-upstream" if split else "ok")


async def test_an_upstream_batch_is_sent_whole_where_budgets_answer_later() -> None:
    """Budgets kept in Redis answer with an awaitable (``synchronous`` False):
    an upstream batch asks them once, without waiting in line, and goes as a
    batch when a node has room for all of it (else its calls go alone)."""

    class LaterBudgets(Budgets):
        def try_take(self, *args: Any, **kw: Any) -> Any:
            async def later() -> Any:
                return Budgets.try_take(self, *args, **kw)

            return later()

    a = up("a", ewma=1.0)
    calls = [Call(i, "state_getStorage", [f"0x0{i}"]) for i in range(3)]
    for rps, sent, kind in ((10, 1, "ok"), (2, 0, "no-upstream")):
        pool, t, clock = setup(a, script={"a": [(0.01, ok("0x1"))]})
        eps = [
            Endpoint(
                url=a.url, provider="p", kind="rpc-http", network="finney", id=a.id, max_rps=rps
            )
        ]
        book = LaterBudgets(eps, clock=clock)
        book.synchronous = False  # as SharedBudgets: take_now steps aside
        adm = Admission(book, FairWait(), client="c", max_wait_s=5.0, clock=clock)
        r = await forward(
            calls, is_batch=True, pool=pool, transport=t, budget=BUDGET, clock=clock,
            admission=adm, split=True,
        )  # fmt: skip
        assert (len(t.calls), r.kind) == (sent, kind)
        assert clock.t < 5000.5  # never waited its turn in line
