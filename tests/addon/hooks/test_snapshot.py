"""The background refresher of the sidecar's routing snapshot: it keeps the
last good snapshot and backs off while the sidecar is down. The sidecar is a
real in-process aiohttp server here."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from addon.hooks.holder import RuntimeHolder
from addon.hooks.snapshot import MAX_BACKOFF_S, SnapshotRefresher
from addon.pipeline.gate import health
from addon.runtime import Runtime
from addon.upstream.pool import TIER_LAGGING, TIER_SYNCED, TIER_UNPROBED
from addon.upstream.snapshot import SnapshotError
from common.config import Config, parse_config
from tests.addon.upstream.test_snapshot import doc, entry, state

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


async def test_healthz_counts_each_networks_snapshots_across_a_reload(
    sidecar: tuple[FakeSidecar, Any], session: aiohttp.ClientSession
) -> None:
    """``/rpc/healthz``'s ``snapshot``: one more per network a refresh applied;
    a refresh failing at a network counts none after it; a reload keeps the
    count (the chain state lives on)."""
    fake, server = sidecar
    rt = runtime_for(server_url(server), session)
    fill(fake, rt.config)
    refresher = SnapshotRefresher(holder_of(rt))
    await refresher.refresh_once()
    await refresher.refresh_once()

    def applied(runtime: Runtime) -> dict[str, object]:
        doc = health(runtime.pools, runtime.config.proxy.networks, runtime.clock(), runtime.chain)
        return {n: s["applied"] for n, s in doc["snapshot"].items()}  # type: ignore[attr-defined]

    assert applied(rt) == {"finney": 2, "test": 2}
    del fake.docs["finney"]  # a 404 at the first network: the round stops there
    with pytest.raises(SnapshotError):
        await refresher.refresh_once()
    assert applied(rt) == {"finney": 2, "test": 2}
    fill(fake, rt.config)
    reloaded = rt.reload(rt.config)
    await SnapshotRefresher(holder_of(reloaded)).refresh_once()
    assert applied(reloaded) == {"finney": 3, "test": 3}


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
