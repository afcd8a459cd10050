"""Where a POST enters (addon/pipeline/gate.py): whom it is charged to, the
API key taken off the request before anything logs or shows it, and the
proxy's own health answer."""

from __future__ import annotations

import random
from typing import Any

from addon.chain.state import ChainState
from addon.pipeline.gate import health
from addon.upstream.pool import TIER_SYNCED, TIER_UNHEALTHY, TIER_UNPROBED, Upstream, UpstreamPool
from tests.addon.helpers import body, call, make, rpc_flow, run

KEY = "partner-key-0123456789abcdef"
TIERS = [
    {"name": "partners", "keys": [KEY], "rate_limit": {"requests": 500}},
    {"name": "lab", "cidrs": ["10.9.0.0/16"], "rate_limit": {"requests": 50}},
]


async def test_a_keyed_client_is_charged_per_key_and_the_key_leaves_the_request() -> None:
    stages, fake, _ = make(tiers=TIERS)
    f = rpc_flow(call("system_health"), path=f"/rpc/v1/finney?x=1&api_key={KEY}")
    f.request.headers["X-Api-Key"] = KEY
    await run(stages, f)
    assert f.response.status_code == 200
    assert f.response.headers["X-RateLimit-Limit"] == "500"
    assert f.request.path == "/rpc/v1/finney?x=1" and "X-Api-Key" not in f.request.headers
    meta = f.metadata["chainproxy"]
    assert meta["client"].startswith("key:partners:") and KEY not in str(meta)
    assert KEY not in f.comment
    assert all(KEY not in str(doc) for _, doc in fake.seen)  # nor sent upstream


async def test_a_wrong_key_is_refused_before_anything_runs() -> None:
    stages, fake, rt = make(tiers=TIERS)
    f = rpc_flow(call("system_health", id_=3), path="/rpc/v1/finney?api_key=wrong-key-of-someone")
    await run(stages, f)
    assert f.response.status_code == 401
    assert body(f)["error"]["data"]["policy"] == "api_key" and body(f)["id"] is None
    assert not fake.seen
    assert rt.metrics._extra[("chainproxy_refusals_total", (("policy", "api_key"),))] == 1


async def test_an_address_tier_without_a_key() -> None:
    stages, _, _ = make(tiers=TIERS)
    f = rpc_flow(call("system_health"))
    f.client_conn.peername = ("10.9.1.2", 5000)
    await run(stages, f)
    assert f.response.headers["X-RateLimit-Limit"] == "50"


async def test_a_gateway_without_keyed_tiers_ignores_a_key_but_never_keeps_it() -> None:
    stages, _, _ = make()
    f = rpc_flow(call("system_health"), path=f"/rpc/v1/finney?api_key={KEY}")
    await run(stages, f)
    assert f.response.status_code == 200 and f.response.headers["X-RateLimit-Limit"] == "100"
    assert f.request.path == "/rpc/v1/finney"


def test_the_proxys_health_counts_the_nodes_a_call_may_go_to() -> None:
    def up(uid: str, tier: int, **kw: Any) -> Upstream:
        return Upstream(uid, f"http://{uid}", uid, False, tier=tier, **kw)

    pool = UpstreamPool(
        [
            up("ok", TIER_SYNCED),
            up("new", TIER_UNPROBED),
            up("down", TIER_UNHEALTHY),
            up("ejected", TIER_SYNCED, ejected_until=200.0),
            up("paused", TIER_SYNCED, backoff_until=200.0),
            up("other-chain", TIER_SYNCED, foreign=True),
            up("outvoted", TIER_SYNCED, quarantined=True),
        ],
        eject_after=3,
        eject_cooldown_s=30.0,
        clock=lambda: 100.0,
        rng=random.Random(1),
    )
    doc = health({"finney": pool}, ("finney", "test"), 100.0)
    assert doc == {
        "status": "ok",
        "networks": {"finney": {"nodes": 7, "usable": 2}, "test": {"nodes": 0, "usable": 0}},
    }
    assert health({"finney": pool}, ("finney",), 201.0)["networks"]["finney"]["usable"] == 4


def test_health_says_how_fresh_the_routing_snapshot_is() -> None:
    chain = ChainState()
    pools: dict[str, UpstreamPool] = {}
    doc = health(pools, ("finney", "test"), 50.0, chain)
    assert doc["snapshot"] == {  # none applied yet
        "finney": {"applied": 0, "age_s": None, "tip": None, "finalized": None},
        "test": {"applied": 0, "age_s": None, "tip": None, "finalized": None},
    }
    chain.set_heights("finney", 10, 8, at=40.0)
    chain.set_heights("finney", 11, 9, at=45.0)
    chain.set_heights("test", None, None)  # heights without a snapshot: not counted
    doc = health(pools, ("finney", "test"), 52.25, chain)
    assert doc["snapshot"] == {
        "finney": {"applied": 2, "age_s": 7.2, "tip": 11, "finalized": 9},
        "test": {"applied": 0, "age_s": None, "tip": None, "finalized": None},
    }
