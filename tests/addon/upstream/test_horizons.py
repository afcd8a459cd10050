"""Routing by the nodes' state horizons: which upstreams hold, may hold or
lack a block's state (from the snapshot, moved with the tip, corrected by
what a node answered), the choice that follows, the snapshot fields, and a
forward that corrects a node and goes on to another within its deadline."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from addon.chain.horizons import correct, coverage, earliest, oldest_block, settle
from addon.chain.state_unavailable import POLICY, STATE_UNAVAILABLE, state_unavailable, unheld
from addon.rpc.jsonrpc import Call
from addon.upstream.admission import Admission
from addon.upstream.budgets import Budgets
from addon.upstream.failover import no_state
from addon.upstream.fair_wait import FairWait
from addon.upstream.forward import forward
from addon.upstream.pool import TIER_LAGGING, TIER_SYNCED, Upstream, UpstreamPool
from addon.upstream.snapshot import SnapshotError, apply_snapshot
from common.config import Endpoint
from tests.addon.upstream.test_forward import (
    BUDGET,
    DISCARDED,
    HASH,
    ok,
    rpc_error,
    setup,
    up,
    url,
)
from tests.fakes import FakeClock

TIP = 10_000


def node(
    name: str,
    *,
    horizon: int | None = None,
    lost: int | None = None,
    keeps: int | None = None,
    archive: bool = False,
    best: int | None = TIP,
    tier: int = TIER_SYNCED,
) -> Upstream:
    u = up(name, tier, archive=archive)
    u.horizon, u.horizon_lost, u.keeps, u.best = horizon, lost, keeps, best
    return u


def pool(*ups: Upstream) -> UpstreamPool:
    p = UpstreamPool(
        ups, eject_after=3, eject_cooldown_s=30.0, clock=FakeClock(5000.0), rng=random.Random(1)
    )
    p.tip = TIP
    return p


# --- coverage ----------------------------------------------------------------------------


def test_coverage_from_the_measured_horizon() -> None:
    pruned = node("p", horizon=TIP - 255, lost=TIP - 256, keeps=256)
    assert coverage(pruned, TIP, TIP) == "holds"
    assert coverage(pruned, TIP - 255, TIP) == "holds"
    assert coverage(pruned, TIP - 256, TIP) == "lacks"
    assert coverage(pruned, 1, TIP) == "lacks"
    # a pruned node's horizon moves up with the tip (``keeps``), measured or not yet
    assert coverage(pruned, TIP - 255, TIP + 10) == "maybe"
    assert earliest(pruned, TIP + 10) == TIP + 10 - 255
    narrowing = node("n", horizon=TIP - 64, lost=TIP - 256)  # not narrowed down yet
    assert [coverage(narrowing, b, TIP) for b in (TIP - 64, TIP - 100, TIP - 256)] == [
        "holds",
        "maybe",
        "lacks",
    ]


def test_with_nothing_measured_the_archive_flag_holds_and_others_may() -> None:
    assert coverage(node("a", archive=True), 0, TIP) == "holds"
    assert coverage(node("x"), 0, TIP) == "maybe"
    assert oldest_block([node("a", archive=True), node("x")], TIP) == 0
    assert oldest_block([node("x"), node("p", horizon=TIP - 99)], TIP) == TIP - 99
    assert oldest_block([node("x")], TIP) is None


def test_oldest_block_tells_a_client_only_what_is_known_held() -> None:
    """A node flagged archive that answered "discarded" at a block: routing
    takes it to hold from the next block on (a guess it corrects as it goes),
    but a client is not told so (told it, a client walked up one block per
    refusal): the oldest block is another node's measured one, or unknown."""
    pruned_archive = node("a", archive=True)
    correct(pruned_archive, TIP - 500)
    assert earliest(pruned_archive, TIP) == TIP - 499  # routing's guess
    measured = node("p", horizon=TIP - 255, lost=TIP - 256)  # as the sidecar measures one
    assert oldest_block([pruned_archive, measured], TIP) == TIP - 255
    assert oldest_block([pruned_archive], TIP) is None
    # a block found lost below the measured start contradicts nothing
    correct(measured, TIP - 300)
    assert oldest_block([measured], TIP) == TIP - 255


def test_a_correction_lacks_at_once_and_settles_with_the_sidecar() -> None:
    u = node("p", horizon=TIP - 1000, lost=TIP - 2000)
    u.horizon_rounds = 7
    assert coverage(u, TIP - 500, TIP) == "holds"
    assert correct(u, TIP - 500) is True
    assert coverage(u, TIP - 500, TIP) == "lacks" and coverage(u, TIP - 499, TIP) == "holds"
    assert correct(u, TIP - 600) is False  # nothing new
    settle(u)
    assert u.lost_seen == TIP - 500  # the sidecar has not checked again yet
    u.horizon_lost = TIP - 500  # its next probe checked the reported block
    settle(u)
    assert u.lost_seen is None and coverage(u, TIP - 500, TIP) == "lacks"
    v = node("q", horizon=TIP - 1000)
    v.horizon_rounds = 3
    correct(v, TIP - 500)
    v.horizon_rounds = 4
    settle(v)
    assert v.lost_seen is not None
    v.horizon_rounds = 5  # two rounds later: the sidecar's word stands
    settle(v)
    assert v.lost_seen is None


def test_an_unknown_block_corrects_only_well_below_the_nodes_best() -> None:
    u = node("p")
    assert correct(u, TIP - 10, "unknown-block") is False  # not imported yet, or a fresh fork
    assert correct(u, TIP - 1000, "unknown-block") is True
    assert correct(node("q", best=None), 5, "unknown-block") is False
    assert correct(node("r"), 5, "null-pinned") is False


# --- the choice --------------------------------------------------------------------------


def test_a_node_that_lacks_the_block_is_never_chosen_one_that_holds_it_first() -> None:
    pruned = node("pruned", horizon=TIP - 255, lost=TIP - 256, keeps=256)
    unknown = node("unknown")
    archive = node("archive", horizon=0, tier=TIER_LAGGING)
    p = pool(pruned, unknown, archive)
    for _ in range(20):
        assert p.choose(set(), state_block=TIP - 1000) is archive
        assert p.choose({archive.id}, state_block=TIP - 1000) is unknown
    assert p.choose({archive.id, unknown.id}, state_block=TIP - 1000) is None
    # at the head everyone holds it: the tiers decide again
    assert p.choose(set(), state_block=TIP) in (pruned, unknown)


def test_the_state_block_wins_over_the_archive_preference() -> None:
    long_window = node("long", horizon=TIP - 5000, lost=TIP - 5001, keeps=5001)
    archive = node("archive", archive=True, tier=TIER_LAGGING)
    p = pool(long_window, archive)
    assert p.choose(set(), prefer_archive=True, state_block=TIP - 1000) is long_window
    assert p.choose(set(), prefer_archive=True) is archive


# --- the snapshot --------------------------------------------------------------------------


def doc(**fields: Any) -> dict[str, Any]:
    row = {"id": "endpoint-srf-a", "tier": 0, "score": 1.0, "best": TIP, "archive": False}
    return {"tip": TIP, "finalized": TIP - 2, "upstreams": [row | fields]}


def test_the_snapshot_brings_each_horizon_and_settles_corrections() -> None:
    a = node("a", best=None)
    p = pool(a)
    p.tip = None
    apply_snapshot(p, doc(horizon=TIP - 99, horizon_lost=TIP - 100, keeps=100, horizon_rounds=4))
    assert (a.horizon, a.horizon_lost, a.keeps, a.horizon_rounds) == (
        TIP - 99,
        TIP - 100,
        100,
        4,
    )
    assert p.tip == TIP
    correct(a, TIP - 50)
    apply_snapshot(p, doc(horizon=TIP - 99, horizon_lost=TIP - 50, horizon_rounds=5))
    assert a.lost_seen is None  # the sidecar checked it
    apply_snapshot(p, doc())  # an older sidecar's snapshot: no horizon fields
    assert (a.horizon, a.horizon_lost, a.keeps, a.horizon_rounds) == (None, None, None, 0)


@pytest.mark.parametrize(
    "bad",
    [
        {"horizon": "5"},
        {"horizon": -1},
        {"keeps": 1.5},
        {"horizon_rounds": None},
        {"horizon_lost": True},
    ],
)
def test_a_malformed_horizon_refuses_the_snapshot(bad: dict[str, Any]) -> None:
    a = node("a", horizon=7)
    with pytest.raises(SnapshotError):
        apply_snapshot(pool(a), doc(**bad))
    assert a.horizon == 7


# --- the typed error -----------------------------------------------------------------------


def test_the_typed_error_names_the_block_and_the_oldest_one_held() -> None:
    ups = [node("p", horizon=TIP - 255, lost=TIP - 256), node("q", horizon=TIP - 999, lost=3)]
    assert unheld(ups, TIP - 1000, TIP) is False  # q may: between 3 and TIP - 999
    assert unheld(ups, 2, TIP) is True
    err = state_unavailable(7, "finney", 2, ups, TIP)
    assert err["id"] == 7 and err["error"]["code"] == STATE_UNAVAILABLE
    assert "State already discarded" in err["error"]["message"]
    data = err["error"]["data"]
    assert data["policy"] == POLICY == "state_unavailable"
    assert (data["block"], data["oldest_block"]) == (2, TIP - 999)
    call = Call(1, "state_getStorage", ["0x26aa", HASH])
    gone = {"jsonrpc": "2.0", "id": 1, "error": {"code": 4003, "message": DISCARDED}}
    assert no_state(call, gone, TIP) == "state-discarded"
    assert no_state(call, {"jsonrpc": "2.0", "id": 1, "result": None}, TIP) is None


# --- a forward ----------------------------------------------------------------------------


async def test_a_node_wrongly_believed_to_hold_the_block_is_corrected_and_the_call_goes_on() -> (
    None
):
    believed = node("believed", horizon=TIP - 2000, lost=TIP - 3000)  # it says it holds it
    other = node("other", horizon=TIP - 2000, lost=TIP - 3000)
    p, t, clock = setup(
        believed,
        other,
        script={
            "believed": [(0.01, rpc_error(4003, DISCARDED))],
            "other": [(0.01, ok("0x01"))],
        },
    )
    p.tip = TIP
    believed.ewma_ms, other.ewma_ms = 1.0, 900.0  # believed is chosen first
    believed.updated_at = other.updated_at = clock.t
    r = await forward(
        [Call(3, "state_getStorage", ["0x26aa", HASH])],
        is_batch=False,
        pool=p,
        transport=t,
        budget=BUDGET,
        clock=clock,
        tip=TIP,
        state_block=TIP - 1500,
    )
    assert t.urls() == [url("believed"), url("other")]
    assert r.kind == "ok" and r.upstream is other and r.corrected == (believed.id,)
    assert coverage(believed, TIP - 1500, TIP) == "lacks"
    assert p.choose(set(), state_block=TIP - 1500) is other


# --- beside the node limits and the light routing (main's) ---------------------------------


def test_a_light_read_avoids_a_busy_holder_but_never_goes_to_a_node_that_lacks_the_block() -> None:
    busy = node("busy", horizon=0)
    calm = node("calm", horizon=0)
    pruned = node("pruned", horizon=TIP - 255, lost=TIP - 256)
    p = pool(busy, calm, pruned)
    p.started(busy, heavy=True)
    for _ in range(20):
        assert p.choose(set(), state_block=TIP - 1000, light=True) is calm
    p.started(calm, heavy=True)  # both holders busy: still one of them, never the pruned one
    for _ in range(20):
        assert p.choose(set(), state_block=TIP - 1000, light=True) in (busy, calm)
    assert p.choose({busy.id, calm.id}, state_block=TIP - 1000, light=True) is None


async def test_a_correction_and_a_nodes_work_limit_in_one_call_then_the_answer() -> None:
    """A node believed to hold the block says "discarded" (corrected), the next
    one refuses for its limits (-32004: its capacity, not an answer), the third
    answers; the node measured to lack the block is never asked."""
    believed = node("believed", horizon=TIP - 2000)
    limited = node("limited", horizon=TIP - 2000)
    unknown = node("unknown")  # nothing measured: it may hold it
    pruned = node("pruned", horizon=TIP - 255, lost=TIP - 256)
    p, t, clock = setup(
        believed,
        limited,
        unknown,
        pruned,
        script={
            "believed": [(0.01, rpc_error(4003, DISCARDED))],
            "limited": [(0.01, rpc_error(-32004, "RPC work limit exceeded"))],
            "unknown": [(0.01, ok("0x01"))],
            "pruned": [(0.01, ok("0x02"))],
        },
    )
    p.tip = TIP
    believed.ewma_ms, limited.ewma_ms, pruned.ewma_ms = 1.0, 900.0, 0.1
    believed.updated_at = limited.updated_at = pruned.updated_at = clock.t
    r = await forward(
        [Call(3, "state_getStorage", ["0x26aa", HASH])],
        is_batch=False,
        pool=p,
        transport=t,
        budget=BUDGET,
        clock=clock,
        tip=TIP,
        state_block=TIP - 1500,
    )
    assert t.urls() == [url("believed"), url("limited"), url("unknown")]
    assert [a.reason for a in r.attempts][:2] == ["state-discarded", "work-limited"]
    assert r.kind == "ok" and r.upstream is unknown and r.corrected == (believed.id,)
    assert coverage(limited, TIP - 1500, TIP) == "holds"  # a limit says nothing of its state


async def test_with_budgets_kept_a_failover_still_goes_only_to_nodes_that_may_hold_the_block() -> (
    None
):
    """The admission's passes (first nodes with room under a learned rate, then
    past it) choose by the block's state too: the cheapest node, measured to
    lack the block, is never the failover."""
    believed = node("believed", horizon=TIP - 2000)
    other = node("other", horizon=TIP - 2000)
    pruned = node("pruned", horizon=TIP - 255, lost=TIP - 256)
    p, t, clock = setup(
        believed,
        other,
        pruned,
        script={
            "believed": [(0.01, rpc_error(4003, DISCARDED))],
            "other": [(0.01, ok("0x01"))],
            "pruned": [(0.01, ok("0x02"))],
        },
    )
    p.tip = TIP
    believed.ewma_ms, other.ewma_ms, pruned.ewma_ms = 1.0, 900.0, 0.1
    believed.updated_at = other.updated_at = pruned.updated_at = clock.t
    eps = [
        Endpoint(url=u.url, provider="p", kind="rpc-http", network="finney", id=u.id)
        for u in p.upstreams.values()
    ]
    admission = Admission(
        Budgets(eps, clock=clock), FairWait(), client="c", max_wait_s=0.0, clock=clock
    )
    r = await forward(
        [Call(3, "state_getStorage", ["0x26aa", HASH])],
        is_batch=False,
        pool=p,
        transport=t,
        budget=BUDGET,
        clock=clock,
        tip=TIP,
        admission=admission,
        state_block=TIP - 1500,
    )
    assert t.urls() == [url("believed"), url("other")]
    assert r.kind == "ok" and r.upstream is other and r.corrected == (believed.id,)


async def test_a_batch_corrects_a_node_only_with_the_block_of_the_item_that_said_so() -> None:
    """A batch's items are judged apart: an item refused at a hash of unknown
    height corrects nothing, whatever block the batch's other items read (the
    batch's oldest block is not the refused item's). Two cases a review found:
    an unknown hash beside a read at genesis marked an archive as holding
    nothing up to genesis; an old hash beside a read at the head marked a full
    node as holding nothing up to the head."""
    from addon.rpc.blocks import BlockIndex

    known, unknown = "0x" + "01" * 32, "0x" + "ab" * 32

    def answers(error: str) -> Any:
        def answer(doc: Any) -> tuple[int, bytes]:
            out = [
                {"jsonrpc": "2.0", "id": o["id"], "result": "0x01"}
                if o["params"][1] == known
                else {"jsonrpc": "2.0", "id": o["id"], "error": {"code": 4003, "message": error}}
                for o in doc
            ]
            return 200, json.dumps(out).encode()

        return answer

    calls = [
        Call(1, "state_getStorage", ["0x13", known]),
        Call(2, "state_getStorage", ["0x11", unknown]),
    ]
    for height, error, archive in (
        (0, "UnknownBlock: Header was not found", True),  # genesis beside an unknown hash
        (TIP - 1, DISCARDED, False),  # the head beside an old hash
    ):
        blocks = BlockIndex()
        blocks.put(known, height)
        u = node("n", horizon=0 if archive else TIP - 255, archive=archive)
        p, t, clock = setup(u, script={"n": [(0.01, answers(error))]})
        p.tip = TIP
        r = await forward(
            calls, is_batch=True, pool=p, transport=t, budget=BUDGET, clock=clock, tip=TIP,
            state_block=height, blocks=blocks,
        )  # fmt: skip
        assert r.kind == "soft" and r.answers is not None and r.answers[0]["result"] == "0x01"
        assert u.lost_seen is None and r.corrected == ()
        assert coverage(u, height, TIP) != "lacks"
