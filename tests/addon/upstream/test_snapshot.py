"""The addon's copy of the sidecar's routing snapshot:
applied to the upstream pools by id, malformed documents refused whole, and a
background refresher that keeps the last good snapshot and backs off while the
sidecar is down. The sidecar is a real in-process aiohttp server here."""

from __future__ import annotations

import copy
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import astuple
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from addon.runtime import Runtime, RuntimeHolder
from addon.upstream.pool import (
    TIER_LAGGING,
    TIER_SYNCED,
    TIER_UNHEALTHY,
    TIER_UNPROBED,
    Upstream,
    UpstreamPool,
)
from addon.upstream.snapshot import MAX_BACKOFF_S, SnapshotError, SnapshotRefresher, apply_snapshot
from common.config import Config, parse_config

# --- apply_snapshot -----------------------------------------------------------------------


def make_pool(*ids: str) -> UpstreamPool:
    return UpstreamPool(
        (Upstream(id=i, url=f"https://{i}.example.org", provider=i, archive=False) for i in ids),
        eject_after=3,
        eject_cooldown_s=30.0,
        clock=lambda: 1000.0,
        rng=random.Random(1),
    )


def entry(id_: str, tier: Any = 0, **kw: Any) -> dict[str, Any]:
    e = {
        "id": id_,
        "url": f"https://{id_}.example.org",
        "provider": id_,
        "archive": False,
        "healthy": tier in (0, 1),
        "synced": tier == 0,
        "lag": 0,
        "latency_ms": 20,
        "score": 1.0,
        "tier": tier,
    }
    e.update(kw)
    return e


def doc(*entries: dict[str, Any], tip: Any = 100, finalized: Any = 98) -> dict[str, Any]:
    return {
        "network": "finney",
        "tip": tip,
        "finalized": finalized,
        "generated_at": "2024-01-01T00:00:00Z",
        "upstreams": list(entries),
    }


def state(pool: UpstreamPool) -> dict[str, tuple[Any, ...]]:
    return {uid: astuple(u) for uid, u in pool.upstreams.items()}


def test_applies_tier_score_best_and_archive_by_id() -> None:
    pool = make_pool("a", "b", "c")
    tip_fin = apply_snapshot(
        pool,
        doc(
            entry("b", TIER_LAGGING, score=0.5, best=90, archive=True),
            entry("a", TIER_SYNCED, score=0.9, best=100),
            entry("c", TIER_UNHEALTHY, score=0.1, best=None),
        ),
    )
    assert tip_fin == (100, 98)
    a, b, c = (pool.upstreams[i] for i in "abc")
    assert (a.tier, a.score, a.best, a.archive) == (TIER_SYNCED, 0.9, 100, False)
    assert (b.tier, b.score, b.best, b.archive) == (TIER_LAGGING, 0.5, 90, True)
    assert (c.tier, c.score, c.best) == (TIER_UNHEALTHY, 0.1, None)
    # And the choice follows the snapshot: the synced upstream is tried first.
    assert pool.choose(set()) is a
    assert pool.choose({"a"}) is b


def test_archive_false_from_the_sidecar_overrides_the_config_flag() -> None:
    pool = make_pool("a")
    pool.upstreams["a"].archive = True  # configured archive
    apply_snapshot(pool, doc(entry("a", archive=False)))
    assert pool.upstreams["a"].archive is False


def test_ids_unknown_to_the_pool_are_ignored() -> None:
    pool = make_pool("a")
    apply_snapshot(pool, doc(entry("a", best=100), entry("stranger", best=200)))
    assert set(pool.upstreams) == {"a"}
    assert pool.upstreams["a"].best == 100


def test_pool_upstreams_missing_from_the_doc_become_unprobed() -> None:
    pool = make_pool("a", "b")
    apply_snapshot(pool, doc(entry("a", best=100), entry("b", TIER_SYNCED, score=0.4, best=99)))
    apply_snapshot(pool, doc(entry("a", best=101)))  # b left the sidecar's list
    b = pool.upstreams["b"]
    assert (b.tier, b.score, b.best) == (TIER_UNPROBED, 1.0, None)
    assert pool.upstreams["a"].best == 101


def test_empty_upstream_list_makes_everything_unprobed() -> None:
    pool = make_pool("a", "b")
    apply_snapshot(pool, doc(entry("a"), entry("b")))
    assert apply_snapshot(pool, doc(tip=None, finalized=None)) == (None, None)
    assert {u.tier for u in pool.upstreams.values()} == {TIER_UNPROBED}


def test_zero_score_does_not_make_an_upstream_unusable() -> None:
    pool = make_pool("a")
    apply_snapshot(pool, doc(entry("a", score=0)))
    assert pool.upstreams["a"].score > 0
    assert pool.choose(set()) is pool.upstreams["a"]


def test_missing_optional_fields_take_safe_defaults() -> None:
    pool = make_pool("a")
    apply_snapshot(pool, {"upstreams": [{"id": "a", "tier": 1}]})
    a = pool.upstreams["a"]
    assert (a.tier, a.score, a.best, a.archive) == (1, 1.0, None, False)


MALFORMED = {
    "missing upstreams": {"network": "finney", "tip": 100, "finalized": 98},
    "upstreams null": doc() | {"upstreams": None},
    "upstreams not a list of objects": doc() | {"upstreams": [1, 2]},
    "entry without id": doc({k: v for k, v in entry("a").items() if k != "id"}),
    "entry without tier": doc({k: v for k, v in entry("a").items() if k != "tier"}),
    "tier not a number": doc(entry("a"), entry("b", tier="fast")),
    "tier null": doc(entry("a"), entry("b", tier=None)),
    "tip a string": doc(entry("a"), tip="100"),
    "tip a float": doc(entry("a"), tip=100.5),
    "tip a bool": doc(entry("a"), tip=True),
    "finalized a string": doc(entry("a"), finalized="0x62"),
    "best a bool": doc(entry("a"), entry("b", best=True)),
    "best a string": doc(entry("a"), entry("b", best="99")),
    "score not a number": doc(entry("a"), entry("b", score="high")),
}


@pytest.mark.parametrize("bad", list(MALFORMED.values()), ids=list(MALFORMED))
def test_malformed_docs_raise_and_leave_the_pool_unchanged(bad: dict[str, Any]) -> None:
    pool = make_pool("a", "b")
    apply_snapshot(pool, doc(entry("a", TIER_LAGGING, best=7, archive=True), entry("b", 3)))
    before = state(pool)
    with pytest.raises(SnapshotError):
        apply_snapshot(pool, bad)
    assert state(pool) == before


@pytest.mark.parametrize("bad", [None, [], "routes", 5], ids=["null", "list", "string", "number"])
def test_a_document_that_is_not_an_object_raises_snapshot_error(bad: Any) -> None:
    pool = make_pool("a")
    before = state(pool)
    with pytest.raises(SnapshotError):
        apply_snapshot(pool, bad)
    assert state(pool) == before


# --- SnapshotRefresher against an in-process sidecar --------------------------------------


class FakeSidecar:
    """Serves /api/v1/internal/routes/<network>; ``mode`` switches its behaviour."""

    def __init__(self) -> None:
        self.docs: dict[str, dict[str, Any]] = {}
        self.mode = "ok"  # ok | 500 | garbage | empty | list
        self.requests: list[tuple[str, str | None]] = []

    async def routes(self, request: web.Request) -> web.Response:
        network = request.match_info["network"]
        self.requests.append((network, request.headers.get("Authorization")))
        if self.mode == "500":
            return web.json_response({"error": "boom"}, status=500)
        if self.mode == "garbage":
            return web.Response(text="<html>not json</html>", content_type="text/html")
        if self.mode == "empty":
            return web.Response(body=b"", content_type="application/json")
        if self.mode == "list":
            return web.json_response([])
        if network not in self.docs:
            return web.json_response({"error": "unknown network"}, status=404)
        return web.json_response(self.docs[network])

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v1/internal/routes/{network}", self.routes)
        return app


def make_config(sidecar_url: str, token: str | None = "t") -> Config:
    def node(name: str, network: str) -> dict[str, Any]:
        return {
            "url": f"https://{name}.example.org",
            "provider": name,
            "kind": "node-rpc",
            "network": network,
        }

    return parse_config(
        {
            "sidecar": {"url": sidecar_url, "token": token},
            "registry": {
                "endpoints": [
                    node("fa", "finney"),
                    node("fb", "finney"),
                    node("ta", "test"),
                    {
                        "url": "wss://fw.example.org",
                        "provider": "fw",
                        "kind": "node-wss",
                        "network": "finney",
                    },
                ]
            },
        },
        env={},
    )


def ids(cfg: Config) -> dict[str, str]:
    return {e.provider: e.id for e in cfg.endpoints}


def fill(sidecar: FakeSidecar, cfg: Config, finney_tip: int = 100) -> None:
    i = ids(cfg)
    sidecar.docs["finney"] = doc(
        entry(i["fa"], TIER_SYNCED, best=finney_tip, score=0.9),
        entry(i["fb"], TIER_LAGGING, best=finney_tip - 10, archive=True),
        tip=finney_tip,
        finalized=finney_tip - 2,
    ) | {"network": "finney"}
    sidecar.docs["test"] = doc(entry(i["ta"], TIER_SYNCED, best=7000), tip=7000, finalized=6998) | {
        "network": "test"
    }


@pytest.fixture
async def sidecar(aiohttp_server: Any) -> AsyncIterator[tuple[FakeSidecar, Any]]:
    fake = FakeSidecar()
    server = await aiohttp_server(fake.app())
    yield fake, server


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    s = aiohttp.ClientSession()
    yield s
    await s.close()


def runtime_for(url: str, session: aiohttp.ClientSession, token: str | None = "t") -> Runtime:
    rt = Runtime.build(make_config(url, token))
    rt.attach_session(session)
    return rt


def holder_of(rt: Runtime | None) -> RuntimeHolder:
    h = RuntimeHolder()
    h.runtime = rt
    return h


def server_url(server: Any) -> str:
    return str(server.make_url("")).rstrip("/")


async def test_refresh_once_applies_every_network_and_sets_heads(
    sidecar: tuple[FakeSidecar, Any], session: aiohttp.ClientSession
) -> None:
    fake, server = sidecar
    rt = runtime_for(server_url(server), session)
    fill(fake, rt.config)
    i = ids(rt.config)
    refresher = SnapshotRefresher(holder_of(rt))
    await refresher.refresh_once()
    assert rt.chain.tips == {"finney": 100, "test": 7000}
    assert rt.chain.finalized == {"finney": 98, "test": 6998}
    fa, fb = rt.pools["finney"].upstreams[i["fa"]], rt.pools["finney"].upstreams[i["fb"]]
    assert (fa.tier, fa.best, fa.score) == (TIER_SYNCED, 100, 0.9)
    assert (fb.tier, fb.best, fb.archive) == (TIER_LAGGING, 90, True)
    assert rt.pools["test"].upstreams[i["ta"]].best == 7000
    assert i["fw"] not in rt.pools["finney"].upstreams  # WebSocket endpoints are not upstreams
    assert sorted(fake.requests) == [("finney", "Bearer t"), ("test", "Bearer t")]
    assert refresher.applied == 1


async def test_no_authorization_header_without_a_token(
    sidecar: tuple[FakeSidecar, Any], session: aiohttp.ClientSession
) -> None:
    fake, server = sidecar
    rt = runtime_for(server_url(server), session, token=None)
    fill(fake, rt.config)
    await SnapshotRefresher(holder_of(rt)).refresh_once()
    assert {auth for _, auth in fake.requests} == {None}
    assert rt.chain.tips["finney"] == 100


async def test_a_later_snapshot_without_a_tip_forgets_the_old_one(
    sidecar: tuple[FakeSidecar, Any], session: aiohttp.ClientSession
) -> None:
    fake, server = sidecar
    rt = runtime_for(server_url(server), session)
    fill(fake, rt.config)
    refresher = SnapshotRefresher(holder_of(rt))
    await refresher.refresh_once()
    fake.docs["finney"] = doc(tip=None, finalized=None)  # every finney node unhealthy
    await refresher.refresh_once()
    assert "finney" not in rt.chain.tips and "finney" not in rt.chain.finalized
    assert rt.chain.tips["test"] == 7000
    assert {u.tier for u in rt.pools["finney"].upstreams.values()} == {TIER_UNPROBED}


async def test_refresh_once_before_configuration_is_an_error() -> None:
    with pytest.raises(SnapshotError):
        await SnapshotRefresher(holder_of(None)).refresh_once()


async def test_refresh_once_refuses_an_error_answer(
    sidecar: tuple[FakeSidecar, Any], session: aiohttp.ClientSession
) -> None:
    fake, server = sidecar
    rt = runtime_for(server_url(server), session)
    fake.mode = "500"
    with pytest.raises(SnapshotError):
        await SnapshotRefresher(holder_of(rt)).refresh_once()
    assert rt.chain.tips == {}


def backoff(refresh_s: float, failures: int) -> list[float]:
    """Doubling from refresh_s, capped (the cap is at most 30 s)."""
    out, delay = [], refresh_s
    for _ in range(failures):
        delay = min(MAX_BACKOFF_S, delay * 2)
        out.append(delay)
    return out


async def test_the_backoff_cap_is_at_most_30_s(
    sidecar: tuple[FakeSidecar, Any], session: aiohttp.ClientSession
) -> None:
    """The behaviour, not the constant: with the sidecar failing 40 times in a
    row, the refresher's waits double from refresh_s and then stay at one
    value of at most 30 s (the proxy learns of a sidecar back within it)."""
    fake, server = sidecar
    rt = runtime_for(server_url(server), session)
    fake.mode = "500"
    sleep = FakeSleep([None] * 39)
    refresher = SnapshotRefresher(holder_of(rt), refresh_s=1.0, sleep=sleep)
    with pytest.raises(Stop):
        await refresher.run()
    delays = sleep.delays
    assert len(delays) == 40 and refresher.failures == 40
    assert delays[:2] == [2.0, 4.0]  # doubling from refresh_s ...
    assert delays == sorted(delays)  # ... never shorter after another failure ...
    cap = delays[-1]
    assert 1.0 < cap <= 30.0  # ... up to a cap of at most 30 s ...
    assert delays.index(cap) <= 5  # reached within a few doublings ...
    assert set(delays[delays.index(cap) :]) == {cap}  # ... and held there


class Stop(Exception):
    """Ends SnapshotRefresher.run() from the fake sleep."""


class FakeSleep:
    """Records the delays; before returning from call i it runs ``script[i]``;
    stops run() after the script."""

    def __init__(self, script: list[Callable[[], None] | None]) -> None:
        self.script = script
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        i = len(self.delays) - 1
        if i >= len(self.script):
            raise Stop
        action = self.script[i]
        if action is not None:
            action()


def pool_state(rt: Runtime) -> dict[str, dict[str, tuple[Any, ...]]]:
    return {net: copy.deepcopy(state(p)) for net, p in rt.pools.items()}


@pytest.mark.parametrize("failure", ["500", "garbage"])
async def test_run_backs_off_keeps_the_last_snapshot_and_resets_on_success(
    sidecar: tuple[FakeSidecar, Any], session: aiohttp.ClientSession, failure: str
) -> None:
    fake, server = sidecar
    rt = runtime_for(server_url(server), session)
    fill(fake, rt.config)
    good: dict[str, Any] = {}
    kept: list[bool] = []

    def break_it() -> None:
        good.update(pools=pool_state(rt), tips=dict(rt.chain.tips), fin=dict(rt.chain.finalized))
        fake.mode = failure

    def check() -> None:
        kept.append(
            pool_state(rt) == good["pools"]
            and rt.chain.tips == good["tips"]
            and rt.chain.finalized == good["fin"]
        )

    def heal() -> None:
        check()
        fill(fake, rt.config, finney_tip=120)
        fake.mode = "ok"

    script = [break_it, check, check, check, check, check, check, heal, None]
    sleep = FakeSleep(script)
    refresher = SnapshotRefresher(holder_of(rt), refresh_s=1.0, sleep=sleep)
    with pytest.raises(Stop):
        await refresher.run()
    assert sleep.delays == [1.0, *backoff(1.0, 7), 1.0, 1.0]
    assert sleep.delays[2:5] == [4.0, 8.0, min(16.0, MAX_BACKOFF_S)]  # exponential
    assert sleep.delays[6:8] == [MAX_BACKOFF_S, MAX_BACKOFF_S]  # and capped
    assert kept and all(kept)  # the last good snapshot served through every failure
    assert rt.chain.tips["finney"] == 120  # and the next good one replaced it
    assert refresher.failures == 0 and refresher.applied == 3


async def test_run_keeps_the_last_snapshot_while_the_sidecar_is_unreachable(
    sidecar: tuple[FakeSidecar, Any], session: aiohttp.ClientSession
) -> None:
    fake, server = sidecar
    rt = runtime_for(server_url(server), session)
    fill(fake, rt.config)
    await SnapshotRefresher(holder_of(rt)).refresh_once()
    before = pool_state(rt)
    await server.close()  # the sidecar is gone: connection refused from now on

    sleep = FakeSleep([None] * 4)
    refresher = SnapshotRefresher(holder_of(rt), refresh_s=0.5, sleep=sleep)
    with pytest.raises(Stop):
        await refresher.run()
    assert sleep.delays == backoff(0.5, 5)
    assert sleep.delays[:3] == [1.0, 2.0, 4.0]
    assert refresher.failures == 5
    assert pool_state(rt) == before
    assert rt.chain.tips == {"finney": 100, "test": 7000}


async def test_run_waits_refresh_s_between_good_refreshes(
    sidecar: tuple[FakeSidecar, Any], session: aiohttp.ClientSession
) -> None:
    fake, server = sidecar
    rt = runtime_for(server_url(server), session)
    fill(fake, rt.config)
    sleep = FakeSleep([None, None])
    refresher = SnapshotRefresher(holder_of(rt), refresh_s=0.25, sleep=sleep)
    with pytest.raises(Stop):
        await refresher.run()
    assert sleep.delays == [0.25, 0.25, 0.25]
    assert refresher.applied == 3
    assert len(fake.requests) == 6  # both networks each time


@pytest.mark.parametrize("mode", ["empty", "list"])
async def test_run_survives_a_body_that_is_not_an_object(
    sidecar: tuple[FakeSidecar, Any], session: aiohttp.ClientSession, mode: str
) -> None:
    fake, server = sidecar
    rt = runtime_for(server_url(server), session)
    fill(fake, rt.config)

    def heal() -> None:
        fake.mode = "ok"

    fake.mode = mode
    sleep = FakeSleep([None, heal])
    refresher = SnapshotRefresher(holder_of(rt), refresh_s=1.0, sleep=sleep)
    with pytest.raises(Stop):
        await refresher.run()
    assert sleep.delays == [2.0, 4.0, 1.0]
    assert rt.chain.tips["finney"] == 100
