"""Two proxy processes, each with its own data directory (two "machines"), and
one real redis-server: one quota per client, a shared cache, and Redis dying
and coming back without a client noticing."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import yaml

from chainproxy.commands import proxy_argv
from chainproxy.supervisor import Child, free_port, wait_http
from tests.e2e.harness import BIN, Stack, base_config
from tests.e2e.helpers import (
    PROXY_DEFAULTS,
    Client,
    call,
    next_client_ip,
    node_calls,
    post,
    wait_until,
    with_wss,
)
from tests.redis_server import REDIS_SERVER, RedisServer

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed (make test)"),
]


@dataclass
class TwoMachines:
    stack: Stack
    redis: RedisServer
    urls: list[str]  # the RPC URL of each proxy
    procs: list[Child]


@pytest.fixture(scope="module")
def machines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoMachines]:
    tmp = tmp_path_factory.mktemp("two-machines")
    redis = RedisServer(tmp_path_factory.mktemp("redis")).start()
    stack = Stack(tmp)
    try:
        epoch = time.time() - 600
        stack.start_nodes(("alpha", "beta"), epoch=epoch)
        config = with_wss(base_config(tmp, stack.nodes, **PROXY_DEFAULTS))
        # what is tested is the sharing: a check that waits longer than
        # ``timeout_ms`` goes local by design (50 ms in production), and a test
        # machine busy with chopsticks and browsers can hold redis-server off its
        # core that long (fx92: one call past the shared quota, one cache miss)
        config["redis"] = {"url": redis.url, "key_prefix": "e2e:", "timeout_ms": 1000}
        stack.write_config(config)
        stack.start_sidecar()
        urls, procs = [], []
        for machine in ("m1", "m2"):
            own = {**config, "data_dir": str(tmp / machine)}  # its own cache, its own spool
            path = tmp / f"{machine}.yaml"
            path.write_text(yaml.safe_dump(own))
            port = free_port()
            argv = proxy_argv(
                BIN / "mitmdump",
                path,
                config["sidecar"]["url"],
                port=port,
                sets=("termlog_verbosity=warn", "flow_detail=0"),  # warnings: Redis lines
            )
            proc = stack.sup.start(f"mitmdump-{machine}", argv)
            wait_http(f"http://127.0.0.1:{port}/rpc/", proc)
            urls.append(f"http://127.0.0.1:{port}/rpc/v1/finney")
            procs.append(proc)
        yield TwoMachines(stack, redis, urls, procs)
    finally:
        stack.stop()
        redis.stop()


async def _wait_redis_up(m: TwoMachines, ip: str, timeout: float = 15.0) -> None:
    """Until both proxies use Redis again: a call through each is counted in Redis."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        before = [await post(u, call("system_health"), client_ip=ip) for u in m.urls]
        key = f"e2e:rl:100;w=60:{ip}"
        if int(m.redis.command("LLEN", key).strip(b":\r\n") or 0) == 2:
            assert all(r.status == 200 for r in before)
            return
        m.redis.command("DEL", key)
        await asyncio.sleep(0.5)
    pytest.fail("the proxies did not go back to Redis")


async def test_one_quota_for_a_client_across_both_machines(machines: TwoMachines) -> None:
    ip = next_client_ip()
    statuses = []
    for i in range(150):
        r = await post(machines.urls[i % 2], call("system_health", id_=i), client_ip=ip)
        statuses.append(r.status)
        if r.status == 429:
            assert r.body["error"]["data"]["policy"] == "100;w=60"
            assert int(r.headers["Retry-After"]) >= 1
    assert statuses.count(200) == 100 and statuses.count(429) == 50
    assert statuses[:100] == [200] * 100  # the first 100, whichever machine took them


async def test_a_subscription_counts_in_the_same_shared_quota(machines: TwoMachines) -> None:
    ip = next_client_ip()
    for i in range(99):  # 99 calls through the first machine
        assert (
            await post(machines.urls[0], call("system_health", id_=i), client_ip=ip)
        ).status == 200
    ws_url = machines.urls[1].replace("http://", "ws://")
    connector = aiohttp.TCPConnector(local_addr=(ip, 0))
    async with aiohttp.ClientSession(connector=connector) as s:
        async with s.ws_connect(ws_url, timeout=aiohttp.ClientWSTimeout(10)) as ws:
            c = Client(ws)
            first = await c.ask("chain_subscribeNewHeads")  # the 100th call: allowed
            assert isinstance(first.get("result"), str), first
            second = await c.ask("chain_subscribeFinalizedHeads")  # the 101st: refused
            assert second["error"]["data"]["policy"] == "100;w=60", second
            c._reader.cancel()


async def test_a_block_fetched_through_one_machine_is_a_hit_on_the_other(
    machines: TwoMachines,
) -> None:
    block_hash = machines.stack.nodes[0].rpc("chain_getBlockHash", [321])["result"]
    first = await post(machines.urls[0], call("chain_getBlock", [block_hash]))
    assert first.status == 200 and first.headers["X-Cache"] == "MISS"
    # the write to Redis is sent after the answer: until it is there
    await wait_until(
        lambda: block_hash.encode() in machines.redis.command("KEYS", "e2e:cache:*"),
        10,
        "machine 1 wrote the block to Redis",
    )
    since = time.time()
    second = await post(machines.urls[1], call("chain_getBlock", [block_hash], id_="other"))
    assert second.status == 200 and second.headers["X-Cache"] == "HIT"
    assert second.body["id"] == "other" and second.body["result"] == first.body["result"]
    # no upstream call of the block (the probes, which never read a block, may come)
    assert node_calls(machines.stack, "chain_getBlock", since, agent=None) == 0
    # and now machine 2's own disk has it too
    third = await post(machines.urls[1], call("chain_getBlock", [block_hash], id_=3))
    assert third.headers["X-Cache"] == "HIT"


async def test_redis_dies_and_comes_back_and_no_client_notices(machines: TwoMachines) -> None:
    ip = next_client_ip()
    machines.redis.stop()
    results = await asyncio.gather(
        *(post(machines.urls[i % 2], call("system_health", id_=i), client_ip=ip) for i in range(40))
    )
    assert [r.status for r in results] == [200] * 40  # 0 errors: local limiters answered
    block_hash = machines.stack.nodes[0].rpc("chain_getBlockHash", [77])["result"]
    fresh = await post(machines.urls[0], call("chain_getBlock", [block_hash]))
    assert fresh.status == 200  # the cache tier down: fetched upstream
    machines.redis.start()  # empty, same port
    ip2 = next_client_ip()
    await _wait_redis_up(machines, ip2)
    statuses = [
        (await post(machines.urls[i % 2], call("system_health", id_=i), client_ip=ip2)).status
        for i in range(100)
    ]
    assert statuses.count(200) == 98 and statuses.count(429) == 2  # one quota again (2 taken)
    metrics = http_text(f"{machines.stack.sidecar_url}/metrics")
    assert 'chainproxy_redis_fallbacks_total{store="ratelimit"}' in metrics


def http_text(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=5) as r:
        return r.read().decode()


# addon/redislink/link.py's two lines (the first ends "until it answers again" too)
DOWN = "unavailable ("
UP = "answers again: the quota and cache are shared again"


async def test_the_proxies_log_one_line_each_way(machines: TwoMachines) -> None:
    """Its own Redis outage (whatever ran before): each proxy logs exactly one
    line when Redis goes, however many calls fall back meanwhile, and one when
    it answers again; no traceback."""
    logs = [Path(p.log) for p in machines.procs if p.log is not None]
    assert len(logs) == 2, "each proxy writes a log"
    if not machines.redis.ping():  # an earlier test left it down: start from up
        machines.redis.start()
    await _wait_redis_up(machines, next_client_ip())
    start = [len(log.read_text()) for log in logs]

    def since() -> list[str]:
        return [log.read_text()[n:] for log, n in zip(logs, start, strict=True)]

    machines.redis.stop()
    ip = next_client_ip()
    for i in range(20):  # many calls on each proxy while Redis is down: still one line
        r = await post(machines.urls[i % 2], call("system_health", id_=i), client_ip=ip)
        assert r.status == 200
    await wait_until(
        lambda: all(DOWN in text for text in since()),
        15,
        "both proxies logged that Redis is unavailable",
    )
    machines.redis.start()
    await _wait_redis_up(machines, next_client_ip())
    await wait_until(
        lambda: all(UP in text for text in since()),
        15,
        "both proxies logged that Redis answers again",
    )
    for text in since():
        assert text.count(DOWN) == 1 and text.count(UP) == 1, text
        assert "Traceback" not in text
