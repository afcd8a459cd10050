"""Failover as a client sees it: dead, hung, failing and lagging nodes behind a
real mitmdump. Destructive tests (killing nodes, the sidecar) get a stack of
their own."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from common.endpoint_id import endpoint_id
from tests.e2e.harness import Stack
from tests.e2e.helpers import build_stack, call, next_client_ip, post

pytestmark = pytest.mark.e2e


@pytest.fixture
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = build_stack(tmp_path_factory.mktemp("own"), ("alpha", "beta", "gamma"))
    yield s
    s.stop()


async def _load(url: str, n: int, clients: int = 8) -> list[int]:
    """``n`` calls from ``clients`` concurrent clients (each its own address)."""
    ips = [next_client_ip() for _ in range(clients)]
    statuses: list[int] = []

    async def worker(ip: str, count: int) -> None:
        for i in range(count):
            r = await post(url, call("chain_getHeader", id_=i), client_ip=ip)
            statuses.append(r.status if r.body and "result" in r.body else -r.status)

    await asyncio.gather(*(worker(ip, n // clients) for ip in ips))
    return statuses


async def test_killing_a_node_mid_run_gives_no_client_errors(own_stack: Stack) -> None:
    url = own_stack.rpc_url()
    victim = own_stack.nodes[0]

    async def kill_soon() -> None:
        await asyncio.sleep(0.4)
        victim.proc.stop()

    statuses, _ = await asyncio.gather(_load(url, 400), kill_soon())
    assert not victim.proc.alive()
    assert statuses.count(200) == 400, f"client-visible errors: {set(statuses)}"
    # After the kill the survivors carry the traffic.
    after = [n.state()["requests"] for n in own_stack.nodes[1:]]
    statuses = await _load(url, 80)
    assert statuses.count(200) == 80
    assert [n.state()["requests"] for n in own_stack.nodes[1:]] != after

    # Every node dead: 502 listing each endpoint and why.
    for node in own_stack.nodes[1:]:
        node.proc.stop()
    r = await post(url, call("system_health", id_="dead"))
    assert r.status == 502 and r.body["id"] == "dead"
    attempts = r.body["error"]["data"]["attempts"]
    assert {a["endpoint"] for a in attempts} == {endpoint_id(n.url) for n in own_stack.nodes}
    assert {a["reason"] for a in attempts} == {"connect-error"}


async def test_sidecar_down_the_proxy_keeps_serving_and_api_gets_json_502(
    own_stack: Stack,
) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as s:
        async with s.get(own_stack.proxy_url + "/healthz") as resp:
            assert resp.status == 200 and (await resp.json())["status"] == "ok"
    assert own_stack.sidecar is not None
    own_stack.sidecar.stop()
    r = await post(own_stack.rpc_url(), call("chain_getHeader"))
    assert r.status == 200 and r.body["result"]["number"].startswith("0x")
    async with aiohttp.ClientSession() as s:
        async with s.get(own_stack.proxy_url + "/healthz") as resp:
            body = await resp.json()
            assert resp.status == 502 and "sidecar unreachable" in body["error"]["message"]


async def test_hung_node_is_abandoned_at_the_attempt_timeout(stack: Stack) -> None:
    hung = stack.nodes[0]
    hung.control(hang=True)
    url = stack.rpc_url()
    ip = next_client_ip()
    worst = 0.0
    for i in range(12):
        t0 = time.monotonic()
        r = await post(url, call("system_health", id_=i), client_ip=ip)
        worst = max(worst, time.monotonic() - t0)
        assert r.status == 200 and r.body["result"]["peers"] == 8
    # attempt_timeout_s is 1, deadline_s 2.5: a request that met the hung node
    # is abandoned there (mitmproxy alone would wait 600 s). In the full suite on
    # this 2-core machine one call measured 3.0 s end to end twice (1.1 s alone):
    # the bound is the deadline plus a margin, not a benchmark.
    assert worst < 2.5 + 1.5
    assert hung.state()["requests"] >= 1


@pytest.mark.parametrize(
    "fault",
    [
        {"http_status": 503},
        {"http_status": 429},
        {"error_rate": 1.0},
        {"garbage": True},
        {"truncate": True},
        {"close": True},
    ],
    ids=lambda f: next(iter(f)) + "=" + str(next(iter(f.values()))),
)
async def test_transient_upstream_faults_fail_over_invisibly(stack: Stack, fault: dict) -> None:
    await asyncio.sleep(1.1)  # let ejections from earlier tests cool down
    bad = stack.nodes[:2]  # two of three nodes misbehave
    for node in bad:
        node.control(**fault)
    ip = next_client_ip()
    for i in range(15):
        r = await post(stack.rpc_url(), call("chain_getHeader", id_=i), client_ip=ip)
        assert r.status == 200 and "result" in r.body, r.body
    if sum(n.state()["requests"] for n in bad) == 0:
        # Not tried at all is fine only if the sidecar's probes already demoted them.
        from tests.e2e.harness import http_json

        snap = http_json(f"{stack.sidecar_url}/api/v1/internal/routes/finney")
        demoted = {u["id"]: u["tier"] for u in snap["upstreams"]}
        assert all(demoted[endpoint_id(n.url)] == 3 for n in bad), "faulty nodes never tried"


async def test_null_for_a_height_the_lagging_node_has_not_seen_fails_over(stack: Stack) -> None:
    """A pinned-hash read that one node does not know is retried elsewhere."""
    head_hash = stack.nodes[0].rpc("chain_getBlockHash")["result"]
    for node in stack.nodes[:2]:
        node.control(lag=20)  # these two do not know the newest blocks
    ip = next_client_ip()
    for i in range(6):
        r = await post(stack.rpc_url(), call("chain_getHeader", [head_hash], id_=i), client_ip=ip)
        assert r.status == 200 and r.body["result"] is not None, r.body
