"""The pure documents behind the public API and the dashboard: pools, totals, endpoint
lists and pagination, heatmap buckets, incident list and timeline."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.config import Config, parse_config
from sidecar.incidents.tracker import Incident
from sidecar.probing.health import Health
from sidecar.registry.documents import (
    PageError,
    callable_endpoints,
    endpoint_incidents,
    heatmap,
    incident_list,
    incident_timeline,
    latency_bucket,
    parse_page,
    root_endpoints,
    ws_url,
)
from sidecar.registry.pools import endpoint_pools, proxy_pools, registry_totals
from tests.examples import examples

T0 = 1_800_000_000.0


def ep(url: str, provider: str, kind: str = "node-rpc", **kw: Any) -> dict[str, Any]:
    return {"url": url, "provider": provider, "kind": kind, "network": "finney", **kw}


def cfg(*endpoints: dict[str, Any], networks: list[str] | None = None) -> Config:
    raw: dict[str, Any] = {"registry": {"endpoints": list(endpoints)}}
    if networks is not None:
        raw["proxy"] = {"networks": networks}
    return parse_config(raw, env={})


def ok(latency: float | None = 50.0, **kw: Any) -> Health:
    return Health(status="OK", classification="live", last_probe_at=T0, latency_ms=latency, **kw)


def degraded(**kw: Any) -> Health:
    return Health(status="Degraded", classification="dead", last_probe_at=T0, **kw)


FINNEY = cfg(
    ep("https://rpc.a.example", "a", region="eu"),
    ep("https://rpc.b.example/?apikey=SECRET", "b", region="eu"),
    ep("wss://rpc.a.example", "a", "node-wss", region="eu"),
    ep("wss://ws.b.example:8443/?apikey=SECRET", "b", "node-wss", region="us"),
    ep("https://archive.a.example", "a", archive=True, region="eu"),
    ep("https://rpc.t.example", "t", network="test"),
    ep("https://data.example/snap.tar", "d", "data-artifact", subnet=7),
    ep("https://sse.example/events", "d", "sse", subnet=3),
)
E = {i: e for i, e in enumerate(FINNEY.endpoints)}


# --- pools and totals ----------------------------------------------------------------------


def test_proxy_pools_names_members_region_archive_and_eligibility() -> None:
    rows = proxy_pools(FINNEY, {})
    assert rows == [
        {"pool": "finney-rpc", "region": "eu", "members": 3, "archive": False,
         "proxy_eligible": True},
        {"pool": "finney-wss", "region": "", "members": 2, "archive": False,
         "proxy_eligible": True},  # the proxy's WebSocket subscriptions use them
        {"pool": "finney-archive", "region": "eu", "members": 1, "archive": True,
         "proxy_eligible": True},
        {"pool": "test-rpc", "region": "", "members": 1, "archive": False,
         "proxy_eligible": True},
    ]  # fmt: skip


def test_pools_of_networks_the_proxy_does_not_serve_are_not_eligible() -> None:
    c = cfg(ep("https://rpc.t.example", "t", network="test"), networks=["finney"])
    assert proxy_pools(c, {}) == [
        {"pool": "test-rpc", "region": "", "members": 1, "archive": False, "proxy_eligible": False}
    ]


def test_wss_pools_are_eligible_only_for_networks_the_proxy_serves() -> None:
    c = cfg(ep("wss://ws.t.example", "t", "node-wss", network="test"), networks=["finney"])
    assert [r["proxy_eligible"] for r in proxy_pools(c, {})] == [False]
    c = cfg(ep("wss://ws.t.example", "t", "node-wss", network="test"), networks=["test"])
    assert [r["proxy_eligible"] for r in proxy_pools(c, {})] == [True]


def test_archive_capability_follows_the_probe_when_conclusive() -> None:
    health = {E[0].id: ok(archive=True), E[4].id: ok(archive=False)}
    rows = {r["pool"]: r for r in endpoint_pools(FINNEY, health)}
    assert rows["finney-archive"]["total"] == 1
    assert rows["finney-archive"]["best_endpoint"] == E[0].id


def test_endpoint_pools_eligible_and_best_endpoint() -> None:
    health = {
        E[0].id: ok(80.0),
        E[1].id: ok(30.0),
        E[4].id: degraded(latency_ms=5.0),  # fastest, but not healthy
        E[2].id: degraded(),
    }
    rows = {r["pool"]: r for r in endpoint_pools(FINNEY, health)}
    assert rows["finney-rpc"] == {
        "pool": "finney-rpc", "kind": "node-rpc", "eligible": 2, "total": 3,
        "best_endpoint": E[1].id,
    }  # fmt: skip
    assert rows["finney-wss"]["kind"] == "node-wss"
    assert (rows["finney-wss"]["eligible"], rows["finney-wss"]["best_endpoint"]) == (0, None)
    assert rows["finney-archive"]["kind"] == "archive"
    assert rows["finney-archive"]["best_endpoint"] is None


def test_registry_totals() -> None:
    health = {E[0].id: ok(), E[1].id: ok(), E[2].id: degraded()}
    assert registry_totals(FINNEY, health) == {
        "endpoints_tracked": 8,
        "rpc_pools": 4,
        "rpc_pools_proxy_eligible": 4,
        "archive_capable": 1,
        "healthy_pct": 66.67,
        "healthy": 2,
        "probed": 3,
    }
    empty = registry_totals(cfg(), {})
    assert empty["healthy_pct"] == 0.0 and empty["rpc_pools"] == 0


# --- root and callable endpoints ---------------------------------------------------------------


def test_root_rows_and_summary() -> None:
    health = {E[0].id: ok(12.4), E[2].id: degraded(latency_ms=40.0)}
    doc = root_endpoints(FINNEY, health)
    assert [r["id"] for r in doc["rows"]] == [E[i].id for i in (0, 1, 2, 3, 4, 5)]
    first, unprobed, down = doc["rows"][0], doc["rows"][1], doc["rows"][2]
    assert first == {
        "id": E[0].id, "provider": "a", "kind": "node-rpc", "classification": "live",
        "status": "OK", "archive": False, "latency_ms": 12, "backoff_until": None,
        "budget": {"max_rps": None, "max_concurrency": None}, "learned_rps": None,
        "horizon": {"earliest": None, "lost": None, "keeps": None, "model": "unknown",
                    "exact": False, "rounds": 0},
    }  # fmt: skip
    assert (unprobed["status"], unprobed["classification"], unprobed["latency_ms"]) == (
        "Unknown",
        "unknown",
        None,
    )
    assert (down["status"], down["classification"]) == ("Degraded", "dead")
    assert doc["summary"] == {"total": 6, "archive_capable": 1, "ok": 1, "unknown": 4}


def test_callable_rows_root_first_then_by_subnet_and_wss_urls() -> None:
    doc = callable_endpoints(FINNEY, {E[0].id: ok(99.6), E[7].id: degraded()})
    assert (doc["total"], doc["page"], doc["pages"], doc["page_size"]) == (8, 1, 1, 25)
    assert [r["subnet"] for r in doc["rows"]] == ["000"] * 6 + ["003", "007"]
    assert [r["kind"] for r in doc["rows"]][-2:] == ["sse", "data-artifact"]
    urls = [r["url"] for r in doc["rows"]]
    assert urls == [
        None, None, "wss://rpc.a.example:443", "wss://ws.b.example:8443?apikey=***",
        None, None, None, None,
    ]  # fmt: skip
    row = doc["rows"][0]
    assert (row["status"], row["latency_ms"], row["probed"]) == ("OK", 100, True)
    assert doc["rows"][1]["latency_ms"] is None and doc["rows"][1]["probed"] is False
    assert doc["rows"][6]["status"] == "Degraded"
    assert "SECRET" not in str(doc)


def test_ws_url_keeps_a_ws_port_and_redacts() -> None:
    c = cfg(ep("ws://127.0.0.1:9944", "s", "node-wss"), ep("ws://u:pw@h.example", "s", "node-wss"))
    assert [ws_url(e) for e in c.endpoints] == ["ws://127.0.0.1:9944", "ws://h.example:80"]


def _sixty() -> Config:
    eps = [
        ep(f"https://n{i}.example", f"p{i % 3}", subnet=(59 - i) % 4, network="finney")
        for i in range(60)
    ]
    return cfg(*eps)


def test_pagination_of_sixty_endpoints() -> None:
    c = _sixty()
    ordered = sorted(enumerate(c.endpoints), key=lambda ie: (ie[1].subnet, ie[0]))
    expected = [e.id for _, e in ordered]
    p1, p2, p3 = (callable_endpoints(c, {}, page) for page in (1, 2, 3))
    assert [p["pages"] for p in (p1, p2, p3)] == [3, 3, 3]
    assert [len(p["rows"]) for p in (p1, p2, p3)] == [25, 25, 10]
    assert [r["id"] for r in p2["rows"]] == expected[25:50]  # rows 26-50
    assert [r["id"] for r in p1["rows"] + p2["rows"] + p3["rows"]] == expected
    subnets = [r["subnet"] for r in p1["rows"] + p2["rows"] + p3["rows"]]
    assert subnets == sorted(subnets) and subnets[0] == "000"
    with pytest.raises(PageError) as err:
        callable_endpoints(c, {}, 4)
    assert err.value.status == 404


def test_pagination_edges() -> None:
    empty = callable_endpoints(cfg(), {}, 1)
    assert (empty["total"], empty["pages"], empty["rows"]) == (0, 1, [])
    with pytest.raises(PageError):
        callable_endpoints(cfg(), {}, 2)
    twenty_five = cfg(*[ep(f"https://n{i}.example", "p") for i in range(25)])
    assert callable_endpoints(twenty_five, {}, 1)["pages"] == 1
    with pytest.raises(PageError):
        callable_endpoints(twenty_five, {}, 2)
    twenty_six = cfg(*[ep(f"https://n{i}.example", "p") for i in range(26)])
    assert len(callable_endpoints(twenty_six, {}, 2)["rows"]) == 1


@pytest.mark.parametrize(
    ("raw", "page", "status"),
    [
        (None, 1, None),
        ("1", 1, None),
        ("07", 7, None),
        ("0", None, 400),
        ("-1", None, 400),
        ("abc", None, 400),
        ("1.5", None, 400),
        ("", None, 400),
        (" 1", None, 400),
        ("\u0661", None, 400),  # an Arabic-Indic digit: str.isdigit() alone would take it
        ("9" * 30, None, 404),
    ],
)
def test_parse_page(raw: str | None, page: int | None, status: int | None) -> None:
    if status is None:
        assert parse_page(raw) == page
    else:
        with pytest.raises(PageError) as err:
            parse_page(raw)
        assert err.value.status == status


# --- heatmap --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ms", "bucket"),
    [(0, 1), (149, 1), (149.4, 1), (150, 2), (399, 2), (400, 3), (999, 3), (1000, 4),
     (5000, 4), (None, 4), (float("inf"), 4)],
)  # fmt: skip
def test_latency_bucket_edges(ms: float | None, bucket: int) -> None:
    assert latency_bucket(ms) == bucket


@pytest.mark.parametrize(
    ("latency", "p50", "bucket"),
    [(149.0, 149, 1), (149.6, 150, 2), (150.0, 150, 2), (400.0, 400, 3), (1000.0, 1000, 4)],
)
def test_heatmap_cell_at_exact_edges(latency: float, p50: int, bucket: int) -> None:
    c = cfg(ep("https://a.example", "a"))
    cell = heatmap(c, {c.endpoints[0].id: ok(latency)})["rows"][0]["cells"]["node-rpc"]
    assert cell == {"p50_ms": p50, "bucket": bucket, "endpoints": 1}  # shown value, its bucket


def test_heatmap_p50_per_provider_and_kind_with_down_endpoints() -> None:
    c = cfg(
        ep("https://a1.example", "zeta"),
        ep("https://a2.example", "zeta"),
        ep("https://a3.example", "zeta"),
        ep("wss://w1.example", "zeta", "node-wss"),
        ep("wss://w2.example", "zeta", "node-wss"),
        ep("https://b1.example", "alpha"),
        ep("https://b2.example", "alpha"),
        ep("https://s.example", "alpha", "sse"),
    )
    e = c.endpoints
    health = {
        e[0].id: ok(100.0),
        e[1].id: ok(300.0),
        e[2].id: degraded(latency_ms=10.0),  # down counts as slowest, not as its old 10 ms
        e[3].id: ok(100.0),
        e[4].id: degraded(),
        e[5].id: ok(20.0),
        e[6].id: Health(status="Unknown", classification="timeout", last_probe_at=T0),
    }
    doc = heatmap(c, health)
    assert doc["buckets"] == [150, 400, 1000]
    assert [r["provider"] for r in doc["rows"]] == ["alpha", "zeta"]
    alpha, zeta = (r["cells"] for r in doc["rows"])
    assert zeta["node-rpc"] == {"p50_ms": 300, "bucket": 2, "endpoints": 3}
    assert zeta["node-wss"] == {"p50_ms": None, "bucket": 4, "endpoints": 2}  # half down
    # alpha node-rpc: 20 ms and a probed endpoint that never answered (down)
    assert alpha["node-rpc"] == {"p50_ms": None, "bucket": 4, "endpoints": 2}
    assert alpha["sse"] == {"p50_ms": None, "bucket": None, "endpoints": 1}  # not probed yet
    assert list(zeta) == ["node-rpc", "node-wss"]


# --- incidents ----------------------------------------------------------------------------------


def _incidents() -> list[Incident]:
    return [
        Incident(1, E[0].id, T0 - 3 * 86400, "dead", ended=T0 - 3 * 86400 + 600),
        Incident(2, E[0].id, T0 - 3600, "timeout", ended=T0 - 1800),
        Incident(3, E[2].id, T0 - 7500, "http-503"),  # same host as E[0]
        Incident(4, E[1].id, T0 - 60, "dead"),
        Incident(5, E[1].id, T0 - 30 * 86400, "dead", ended=T0 - 29 * 86400),  # > 7 days
        Incident(6, "endpoint-srf-ffffffffffffffff", T0 - 10, "dead"),  # not in the registry
    ]


def test_incident_list_newest_first_with_host_count() -> None:
    doc = incident_list(FINNEY, _incidents(), T0)
    assert [i["endpoint"] for i in doc["incidents"]] == [E[1].id, E[0].id, E[2].id, E[0].id]
    assert doc["hosts"] == 2  # rpc.a.example and rpc.b.example
    newest, recent_resolved, long_running, old = doc["incidents"]
    assert newest == {
        "severity": "Degraded",
        "endpoint": E[1].id,
        "state": "ongoing",
        "started": "2027-01-15T07:59:00Z",
        "ended": None,
        "duration": "0h 01m",
        "message": "dead",
    }
    assert (long_running["severity"], long_running["duration"]) == ("Down", "2h 05m")
    assert (recent_resolved["state"], recent_resolved["ended"]) == (
        "resolved",
        "2027-01-15T07:30:00Z",
    )
    assert old["duration"] == "0h 10m" and old["severity"] == "Down"
    assert incident_list(FINNEY, _incidents(), T0, limit=2)["hosts"] == 2
    assert incident_list(cfg(), [], T0) == {"hosts": 0, "incidents": []}


def test_timeline_last_24h_per_endpoint_and_host() -> None:
    doc = incident_timeline(FINNEY, _incidents(), T0)
    rows = {r["endpoint"]: r for r in doc["endpoints"]}
    assert len(rows) == len(FINNEY.endpoints)  # every registry endpoint, zeros included
    assert rows[E[0].id] == {"endpoint": E[0].id, "ongoing": 0, "total": 1}  # 3-day-old one out
    assert rows[E[1].id] == {"endpoint": E[1].id, "ongoing": 1, "total": 1}
    assert rows[E[2].id]["ongoing"] == 1
    assert [r["endpoint"] for r in doc["endpoints"]][:3] == [E[1].id, E[2].id, E[0].id]
    hosts = {h["host"]: h for h in doc["hosts"]}
    assert hosts["rpc.a.example"] == {
        "host": "rpc.a.example",
        "ongoing": 1,
        "total": 2,
        "links": sorted([E[0].id, E[2].id]),
    }
    assert hosts["ws.b.example"]["links"] == [E[3].id]
    assert doc["hosts"][0]["host"] in ("rpc.a.example", "rpc.b.example")
    assert "SECRET" not in str(doc)


def test_timeline_counts_an_incident_that_ended_inside_the_window() -> None:
    old_but_recent_end = Incident(1, E[0].id, T0 - 2 * 86400, "dead", ended=T0 - 3600)
    doc = incident_timeline(FINNEY, [old_but_recent_end], T0)
    assert doc["endpoints"][0] == {"endpoint": E[0].id, "ongoing": 0, "total": 1}


def test_endpoint_incidents() -> None:
    rows = endpoint_incidents(_incidents(), E[0].id, T0)
    assert [r["message"] for r in rows] == ["timeout", "dead"]
    assert endpoint_incidents(_incidents(), E[0].id, T0, limit=1)[0]["message"] == "timeout"


@settings(max_examples=examples(40), deadline=None)
@given(subnets=st.lists(st.integers(min_value=0, max_value=300), max_size=80))
def test_pages_partition_the_registry_in_order(subnets: list[int]) -> None:
    c = cfg(*[ep(f"https://n{i}.example", "p", subnet=s) for i, s in enumerate(subnets)])
    first = callable_endpoints(c, {}, 1)
    pages = first["pages"]
    assert pages == max(1, -(-len(subnets) // 25))
    rows = [r for p in range(1, pages + 1) for r in callable_endpoints(c, {}, p)["rows"]]
    assert len(rows) == len(subnets) == first["total"]
    assert [int(r["subnet"]) for r in rows] == sorted(subnets)
    # Within a subnet, config order is kept.
    index = {e.id: n for n, e in enumerate(c.endpoints)}
    for a, b in itertools.pairwise(rows):
        if a["subnet"] == b["subnet"]:
            assert index[a["id"]] < index[b["id"]]
    with pytest.raises(PageError):
        callable_endpoints(c, {}, pages + 1)


def test_the_state_horizon_decides_archive_capable_and_is_shown() -> None:
    """A node configured ``archive: true`` whose probes found it keeps 256
    blocks is not archive-capable; one configured without whose block 1 is
    held is."""
    from sidecar.probing.horizon import Horizon, observe

    pruned = Horizon()
    for best in (1000, 1001, 1002):  # 64 held, 256 lost; the chain moved: keeps 65..255
        pruned = observe(pruned, best, [(best - 64, True), (best - 256, False)], archive=False)
    c = cfg(
        ep("https://p.example", "p", "node-rpc", archive=True),
        ep("https://a.example", "a", "node-rpc"),
    )
    p, a = c.endpoints
    health = {
        p.id: ok(10.0, best=1002, horizon=pruned),
        a.id: ok(10.0, best=1002, horizon=observe(Horizon(), 1002, [], archive=True)),
    }
    rows = {r["id"]: r for r in root_endpoints(c, health)["rows"]}
    assert rows[p.id]["archive"] is False and rows[a.id]["archive"] is True
    assert rows[p.id]["horizon"] == {
        "earliest": 1002 - 64, "lost": 1002 - 256, "keeps": None, "model": "unknown",
        "exact": False, "rounds": 3,
    }  # fmt: skip
    assert rows[a.id]["horizon"]["earliest"] == 0 and rows[a.id]["horizon"]["model"] == "archive"
