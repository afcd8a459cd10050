"""Fair use on a public gateway, through real processes: calls cost what they
cost (quota units), trusted clients get tiers (by address or API key), and no
client hoards sockets (per process, and across two proxies on one Redis)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
import yaml

from chainproxy.supervisor import free_port
from tests.e2e.harness import Stack, base_config
from tests.e2e.helpers import (
    PROXY_DEFAULTS,
    call,
    metric_value,
    metrics_text,
    next_client_ip,
    post,
    usage_delivered,
    wait_until,
    with_wss,
)
from tests.redis_server import REDIS_SERVER, RedisServer

pytestmark = pytest.mark.e2e

KEY = "partner-key-7f3a9c1e5b2d4f60"  # the secret searched for everywhere below
PREFIX = "0x658faa385070e074c85bf6b568cf0555"
TIERS = [
    {"name": "validators", "cidrs": ["127.0.77.0/24"], "rate_limit": {"requests": 1000}},
    {
        "name": "partners",
        "keys": [KEY],
        "rate_limit": {"requests": 500, "window_s": 60},
        "max_connections_per_client": 40,
    },
]


def _config(tmp: Any, stack: Stack, **extra: Any) -> dict[str, Any]:
    return with_wss(
        base_config(
            tmp,
            stack.nodes,
            **{**PROXY_DEFAULTS, "tiers": TIERS, **extra},
        )
    )


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("gateway")
    stack = Stack(tmp)
    try:
        epoch = time.time() - 600
        stack.start_nodes(("alpha", "beta"), epoch=epoch)
        stack.write_config(_config(tmp, stack))
        stack.start_sidecar()
        # flows printed (flow_detail=2: request lines and headers): the key must not be there
        stack.proxy, stack.proxy_url = stack.start_chainproxy(
            "mitmdump",
            stack.config_path,  # type: ignore[arg-type]
            stack.config["sidecar"]["url"],
            sets=("termlog_verbosity=info", "flow_detail=2"),
            quiet=False,
        )
        yield stack
    finally:
        stack.stop()


def _data(reply: Any) -> dict[str, Any]:
    return reply.body["error"]["data"]


async def test_the_101st_plain_call_is_refused_as_before(gateway: Stack) -> None:
    ip = next_client_ip()
    for i in range(100):
        r = await post(gateway.rpc_url(), call("chain_getHeader", id_=i), client_ip=ip)
        assert r.status == 200, (i, r.body)
    assert r.headers["X-RateLimit-Remaining"] == "0"
    r = await post(gateway.rpc_url(), call("chain_getHeader", id_=100), client_ip=ip)
    assert r.status == 429 and int(r.headers["Retry-After"]) >= 1
    assert r.body["error"]["code"] == -32005
    d = _data(r)
    assert d["policy"] == "100;w=60" and d["cost"] == 1 and d["remaining"] == 0
    assert d["retry_after"] >= 1


async def test_key_pages_of_1000_are_refused_after_about_ten(gateway: Stack) -> None:
    ip = next_client_ip()
    passed = 0
    for i in range(20):
        params = [PREFIX + f"{i:02x}", 1000]
        r = await post(gateway.rpc_url(), call("state_getKeysPaged", params, i), client_ip=ip)
        if r.status == 429:
            d = _data(r)
            assert d["cost"] == 10 and d["remaining"] < 10  # the numbers add up
            assert d["remaining"] == 100 - 10 * passed
            break
        assert r.status == 200, r.body
        passed += 1
        assert int(r.headers["X-RateLimit-Remaining"]) == 100 - 10 * passed
    assert passed == 10


async def test_answers_of_a_mebibyte_are_refused_after_a_handful(gateway: Stack) -> None:
    ip = next_client_ip()
    passed = 0
    for i in range(20):
        params = ["SubnetInfoRuntimeApi_get_all_metagraphs", f"0x{i:04x}"]  # each a miss
        r = await post(gateway.rpc_url(), call("state_call", params, i), client_ip=ip)
        if r.status == 429:
            break
        assert r.status == 200 and len(r.body["result"]) > 1_000_000
        passed += 1
    # the first costs 1 before and 16 after (a little over 1 MiB of JSON); from
    # the second on, the proxy knows this kind of call answers ~1 MiB and takes
    # the 16 before sending it: 5 fit in 100 units, the 6th is refused up front
    assert passed == 5, passed
    d = _data(r)
    # its price and its bytes; nothing taken: the base unit given back
    assert d["cost"] == 17 and d["remaining"] == 15  # 100 - 5 x 17


async def test_a_cache_hit_costs_its_base_cost_only(gateway: Stack) -> None:
    ip = next_client_ip()
    # a block-pinned read: cacheable; the first answer is a miss and pays its bytes
    head = await post(gateway.rpc_url(), call("chain_getFinalizedHead"), client_ip=ip)
    pinned = ["SubnetInfoRuntimeApi_get_all_metagraphs", "0x", head.body["result"]]
    first = await post(gateway.rpc_url(), call("state_call", pinned), client_ip=ip)
    second = await post(gateway.rpc_url(), call("state_call", pinned), client_ip=ip)
    assert first.headers["X-Cache"] == "MISS" and second.headers["X-Cache"] == "HIT"
    third = await post(gateway.rpc_url(), call("system_health"), client_ip=ip)
    left = [int(x.headers["X-RateLimit-Remaining"]) for x in (head, first, second, third)]
    # 99 after the hash; the miss costs 1 and its bytes (1 MiB and 4 bytes of
    # JSON: 16 started 64 KiB blocks past the first 64 KiB), taken before it is
    # sent once the proxy has seen this kind of call (82 left), else after the
    # answer (98 left, then 16 less); the hit costs 1 only (81); a plain call 1 (80)
    assert left[0] == 99 and left[1] in (98, 82) and left[2:] == [81, 80]


async def test_a_cidr_tier_and_a_key_tier_have_their_own_quotas(gateway: Stack) -> None:
    r = await post(gateway.rpc_url(), call("system_health"), client_ip="127.0.77.9")
    assert r.status == 200 and r.headers["X-RateLimit-Limit"] == "1000"
    r = await post(gateway.rpc_url(), call("system_health"), headers={"X-Api-Key": KEY})
    assert r.status == 200 and r.headers["X-RateLimit-Limit"] == "500"
    left = int(r.headers["X-RateLimit-Remaining"])
    # the same key from another address and in the query: the same quota, per key
    r = await post(f"{gateway.rpc_url()}?api_key={KEY}", call("system_health"))
    assert r.status == 200 and r.headers["X-RateLimit-Limit"] == "500"
    assert int(r.headers["X-RateLimit-Remaining"]) == left - 1
    # a keyless client from a tier's address range is still that tier; a keyless
    # client elsewhere gets the default quota
    r = await post(gateway.rpc_url(), call("system_health"))
    assert r.headers["X-RateLimit-Limit"] == "100"


async def test_a_wrong_key_is_401_never_a_downgrade(gateway: Stack) -> None:
    for how in ("header", "query"):
        url = gateway.rpc_url() + ("?api_key=not-a-key-of-ours-at-all" if how == "query" else "")
        headers = {"X-Api-Key": "not-a-key-of-ours-at-all"} if how == "header" else None
        r = await post(url, call("system_health", id_=7), headers=headers)
        assert r.status == 401, how
        assert r.body["error"]["data"]["policy"] == "api_key" and r.body["id"] is None


async def test_the_key_is_nowhere_to_be_seen(gateway: Stack) -> None:
    def counted() -> dict[str, float]:
        text = metrics_text(gateway.sidecar_url)
        return {
            "units": metric_value(text, UNITS, method="chain_getHeader", tier="partners"),
            "rate_limit": metric_value(text, REFUSALS, policy="rate_limit"),
            "api_key": metric_value(text, REFUSALS, policy="api_key"),
        }

    await usage_delivered(gateway)  # the counts of the tests before have all arrived
    before = counted()
    await post(f"{gateway.rpc_url()}?api_key={KEY}", call("chain_getHeader"))
    await post(gateway.rpc_url(), call("chain_getHeader"), headers={"X-Api-Key": KEY})
    # refusals of its own, whatever ran before: a wrong key twice, a quota exceeded once
    wrong = "not-a-key-of-ours-at-all"
    r = await post(gateway.rpc_url(), call("system_health"), headers={"X-Api-Key": wrong})
    assert r.status == 401
    r = await post(f"{gateway.rpc_url()}?api_key={wrong}", call("system_health"))
    assert r.status == 401
    pages = [call("state_getKeysPaged", [PREFIX, 1000], i) for i in range(11)]  # 110 units
    r = await post(gateway.rpc_url(), pages)
    assert r.status == 429 and _data(r)["policy"] == "100;w=60", r.body
    want = {"units": 2.0, "rate_limit": 1.0, "api_key": 2.0}
    want = {k: before[k] + n for k, n in want.items()}

    def reached() -> dict[str, float] | None:  # usage and metrics reach the sidecar
        now = counted()
        return now if all(now[k] >= n for k, n in want.items()) else None

    assert await wait_until(reached, 20, f"the sidecar counted {want}", step=0.2) == want
    async with aiohttp.ClientSession() as s:
        for path in ("/", "/metrics", "/api/v1/usage", "/api/v1/registry/totals"):
            async with s.get(gateway.proxy_url + path) as r:
                assert KEY not in await r.text(), path
        async with s.get(gateway.sidecar_url + "/metrics") as r:
            text = await r.text()
    assert KEY not in text
    log = (gateway.tmp / "mitmdump.log").read_text()
    assert "/rpc/v1/finney" in log  # flows are printed ...
    assert KEY not in log  # ... without the key


UNITS = "chainproxy_quota_units_total"
REFUSALS = "chainproxy_refusals_total"


async def _open(url: str, ip: str, n: int) -> tuple[list[Any], list[Any], aiohttp.ClientSession]:
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(ip, 0), limit=0))
    ws_url = url.replace("http://", "ws://")

    async def one() -> Any:
        try:
            return await session.ws_connect(ws_url, timeout=aiohttp.ClientWSTimeout(ws_close=2))
        except aiohttp.WSServerHandshakeError as e:
            return e

    results = await asyncio.gather(*(one() for _ in range(n)))
    upgraded = [r for r in results if isinstance(r, aiohttp.ClientWebSocketResponse)]
    refused = [r for r in results if isinstance(r, aiohttp.WSServerHandshakeError)]
    return upgraded, refused, session


async def _open_freed(
    url: str, ip: str, n: int, free: int
) -> tuple[list[Any], list[Any], aiohttp.ClientSession]:
    """``_open`` once the proxy has freed the slots of the sockets just closed:
    of ``n``, ``free`` upgrade and the rest are refused. An attempt too early
    (fewer upgraded) closes its sockets and tries again; more is a failure."""

    async def attempt() -> tuple[list[Any], list[Any], aiohttp.ClientSession] | None:
        upgraded, refused, session = await _open(url, ip, n)
        if len(upgraded) == free and len(refused) == n - free:
            return upgraded, refused, session
        assert len(upgraded) < free, f"{len(upgraded)} of {n} upgraded, {free} slots free"
        for ws in upgraded:
            await ws.close()
        await session.close()
        return None

    got = await wait_until(attempt, 15, f"{free} of {n} sockets upgrade", step=0.2)
    return got  # type: ignore[no-any-return]


async def _raw_handshake(url: str, ip: str) -> tuple[int, dict[str, str], Any]:
    """A handshake read byte for byte: the refusal's headers and JSON body."""
    host, port = url.split("//")[1].split("/")[0].split(":")
    reader, writer = await asyncio.open_connection(host, int(port), local_addr=(ip, 0))
    writer.write(
        b"GET /rpc/v1/finney HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    )
    head = (await reader.readuntil(b"\r\n\r\n")).decode()
    lines = head.split("\r\n")
    status = int(lines[0].split()[1])
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    writer.close()
    return status, headers, json.loads(body) if body else None


async def test_no_client_holds_more_than_32_sockets(gateway: Stack) -> None:
    ip = next_client_ip()
    upgraded, refused, session = await _open(gateway.rpc_url(), ip, 40)
    try:
        assert len(upgraded) == 32 and len(refused) == 8
        assert all(e.status == 429 for e in refused)
        status, headers, body = await _raw_handshake(gateway.rpc_url(), ip)
        assert status == 429 and int(headers["Retry-After"]) >= 1
        assert body["error"]["data"]["policy"] == "max_connections"
        assert body["error"]["data"]["limit"] == 32
        # the sockets work, and another client is not affected
        await upgraded[0].send_json(call("system_health", id_=1))
        assert (await upgraded[0].receive_json(timeout=10))["id"] == 1
        other, other_refused, other_session = await _open(gateway.rpc_url(), next_client_ip(), 3)
        assert len(other) == 3 and not other_refused
        await other_session.close()
        # closing sockets frees their slots
        for ws in upgraded[:5]:
            await ws.close()
        again, again_refused, again_session = await _open_freed(gateway.rpc_url(), ip, 6, 5)
        assert len(again) == 5 and len(again_refused) == 1
        await again_session.close()
    finally:
        await session.close()


async def test_a_tier_may_hold_more_sockets(gateway: Stack) -> None:
    url = f"{gateway.rpc_url()}?api_key={KEY}"
    upgraded, refused, session = await _open(url, next_client_ip(), 40)
    await session.close()
    assert len(upgraded) == 40 and not refused


async def test_a_subscribe_over_the_quota_is_refused_like_a_call(gateway: Stack) -> None:
    ip = next_client_ip()
    for i in range(99):
        r = await post(gateway.rpc_url(), call("system_health", id_=i), client_ip=ip)
        assert r.status == 200
    upgraded, _, session = await _open(gateway.rpc_url(), ip, 1)
    try:
        ws = upgraded[0]
        batch = [call("chain_getHeader", id_=1), call("chain_subscribeNewHeads", id_=2)]
        await ws.send_json(batch)  # 2 units, 1 left: the batch is refused whole
        answer = await ws.receive_json(timeout=10)
        assert answer["error"]["code"] == -32005 and answer["error"]["data"]["cost"] == 2
        await ws.send_json(call("chain_subscribeNewHeads", id_=3))  # 1 unit: fits
        answer = await ws.receive_json(timeout=10)
        assert answer["id"] == 3 and isinstance(answer["result"], str)
    finally:
        await session.close()


needs_redis = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed")


@needs_redis
async def test_two_proxies_on_one_redis_enforce_one_socket_cap(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    tmp = tmp_path_factory.mktemp("two-proxies-sockets")
    redis = RedisServer(tmp_path_factory.mktemp("redis-sockets")).start()
    stack = Stack(tmp)
    try:
        stack.start_node("alpha", epoch=time.time() - 600)
        config = _config(tmp, stack, websocket={"max_connections_per_client": 10})
        config["redis"] = {"url": redis.url, "key_prefix": "e2e-sockets:"}
        stack.write_config(config)
        stack.start_sidecar()
        urls = []
        for machine in ("m1", "m2"):
            path = tmp / f"{machine}.yaml"
            path.write_text(yaml.safe_dump({**config, "data_dir": str(tmp / machine)}))
            _, url = stack.start_chainproxy(
                f"mitmdump-{machine}", path, config["sidecar"]["url"], port=free_port()
            )
            urls.append(f"{url}/rpc/v1/finney")
        ip = next_client_ip()
        a, a_refused, sa = await _open(urls[0], ip, 6)
        b, b_refused, sb = await _open(urls[1], ip, 6)
        assert len(a) == 6 and not a_refused  # 6 of 10 on the first proxy
        assert len(b) == 4 and len(b_refused) == 2  # the other 4 on the second
        for ws in a[:3]:
            await ws.close()
        c, c_refused, sc = await _open_freed(urls[1], ip, 4, 3)
        assert len(c) == 3 and len(c_refused) == 1  # a close on one frees a slot on the other
        for s in (sa, sb, sc):
            await s.close()
    finally:
        stack.stop()
        redis.stop()
