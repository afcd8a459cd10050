"""JSON-RPC over WebSocket (``ws://…/rpc/v1/<network>``) through the real
mitmdump + addon to simulated nodes: the same answers, refusals, quota and
failover as over HTTP, concurrent calls on one socket, bad input answered and
the socket kept open."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from tests.e2e.harness import Stack
from tests.e2e.helpers import call, next_client_ip, post

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(mode_stack: Stack) -> Stack:
    """Under each dispatch mode: the WebSocket hooks go through it too."""
    return mode_stack


def ws_url(stack: Stack, network: str = "finney") -> str:
    return stack.rpc_url(network).replace("http://", "ws://")


@asynccontextmanager
async def connect(
    stack: Stack, client_ip: str | None = None, network: str = "finney"
) -> AsyncIterator[aiohttp.ClientWebSocketResponse]:
    connector = aiohttp.TCPConnector(local_addr=(client_ip or next_client_ip(), 0))
    async with aiohttp.ClientSession(connector=connector) as s:
        async with s.ws_connect(ws_url(stack, network), timeout=aiohttp.ClientWSTimeout(10)) as ws:
            yield ws


async def ask(ws: aiohttp.ClientWebSocketResponse, doc: Any, timeout: float = 15) -> Any:
    await ws.send_str(doc if isinstance(doc, str) else json.dumps(doc))
    msg = await asyncio.wait_for(ws.receive(), timeout)
    assert msg.type == aiohttp.WSMsgType.TEXT, msg
    return json.loads(msg.data)


async def test_call_is_answered_like_over_http(stack: Stack) -> None:
    async with connect(stack) as ws:
        got = await ask(ws, call("chain_getBlockHash", [5], id_="abc-1"))
    over_http = await post(stack.rpc_url(), call("chain_getBlockHash", [5], id_="abc-1"))
    assert got == over_http.body
    assert got["id"] == "abc-1" and got["result"].startswith("0x")


async def test_batch_is_one_message_in_request_order(stack: Stack) -> None:
    batch = [
        call("system_chain", id_=1),
        call("author_submitExtrinsic", ["0x00"], id_=2),
        call("chain_getBlockHash", [0], id_=3),
    ]
    async with connect(stack) as ws:
        got = await ask(ws, batch)
    assert [a["id"] for a in got] == [1, 2, 3]
    assert got[0]["result"] == "Bittensor"
    assert got[1]["error"]["code"] == -32601
    assert got[2]["result"].startswith("0x")


async def test_refusals_and_bad_input_are_answered_and_the_socket_stays_open(
    stack: Stack,
) -> None:
    async with connect(stack) as ws:
        write = await ask(ws, call("author_submitExtrinsic", ["0x00"], id_=9))
        assert write["id"] == 9 and write["error"]["code"] == -32601
        assert write["error"]["data"]["policy"] == "allowlist"
        sub = await ask(ws, call("chain_subscribeNewHeads", id_=10))
        # this stack has no node-wss endpoint: subscriptions cannot be served here
        assert sub["error"]["code"] == -32601
        assert "node-wss" in sub["error"]["data"]["reason"]
        junk = await ask(ws, "{not json")
        assert junk["id"] is None and junk["error"]["code"] == -32700
        invalid = await ask(ws, {"jsonrpc": "2.0", "id": 4, "method": ""})
        assert invalid["id"] == 4 and invalid["error"]["code"] == -32600
        big = await ask(ws, call("state_getStorage", ["0x" + "ab" * 600_000]))
        assert big["error"]["code"] == -32600 and "1048576" in big["error"]["message"]
        ok = await ask(ws, call("system_health", id_=11))
        assert ok["id"] == 11 and "result" in ok
        assert not ws.closed
    assert all(n.state()["calls"].get("author_submitExtrinsic", 0) == 0 for n in stack.nodes)


async def test_concurrent_calls_on_one_socket_are_matched_by_id(stack: Stack) -> None:
    """More calls in flight than the per-socket bound (64), each slow: the proxy
    stops reading the socket for a while, then answers every one."""
    n = 90  # within the quota of 100
    for node in stack.nodes:
        node.control(latency_ms=150)
    async with connect(stack) as ws:
        for i in range(n):
            await ws.send_str(json.dumps(call("chain_getBlockHash", [i], id_=f"c{i}")))
        answers = {}
        for _ in range(n):
            msg = await asyncio.wait_for(ws.receive(), 30)
            doc = json.loads(msg.data)
            answers[doc["id"]] = doc
    assert set(answers) == {f"c{i}" for i in range(n)}
    assert all("result" in a for a in answers.values()), answers
    # each answer is the one for its own call
    for i in (0, 7, 63, 64, 89):
        assert answers[f"c{i}"]["result"] == stack.nodes[0].rpc("chain_getBlockHash", [i])["result"]


async def test_quota_is_shared_with_http_and_the_101st_call_is_refused(stack: Stack) -> None:
    ip = next_client_ip()
    for i in range(50):
        r = await post(stack.rpc_url(), call("system_health", id_=i), client_ip=ip)
        assert r.status == 200
    async with connect(stack, client_ip=ip) as ws:
        for i in range(50):
            ok = await ask(ws, call("system_health", id_=i))
            assert "result" in ok, (i, ok)
        over = await ask(ws, call("system_health", id_="over"))
    assert over["id"] == "over" and over["error"]["code"] == -32005
    assert over["error"]["data"]["policy"] == "100;w=60"
    assert 1 <= over["error"]["data"]["retry_after"] <= 60


async def test_failing_upstreams_fail_over_invisibly(stack: Stack) -> None:
    a, b = stack.nodes[0], stack.nodes[1]
    a.control(http_status=503)
    b.control(close=True)
    async with connect(stack) as ws:
        for i in range(12):
            got = await ask(ws, call("chain_getBlockHash", [i], id_=i))
            assert got["id"] == i and got["result"].startswith("0x"), got


async def test_unknown_network_refuses_the_handshake(stack: Stack) -> None:
    with pytest.raises(aiohttp.WSServerHandshakeError) as e:
        async with connect(stack, network="nosuchnet"):
            pass
    assert e.value.status == 404


async def test_client_going_away_mid_call_leaves_the_proxy_serving(stack: Stack) -> None:
    slow = stack.nodes
    for n in slow:
        n.control(latency_ms=400)
    async with connect(stack) as ws:
        await ws.send_str(json.dumps(call("system_health", id_=1)))
        await asyncio.sleep(0.1)
    for n in slow:
        n.control(latency_ms=0)
    async with connect(stack) as ws:
        ok = await ask(ws, call("system_health", id_=2))
    assert ok["id"] == 2 and "result" in ok
    r = await post(stack.rpc_url(), call("system_health"))
    assert r.status == 200


async def test_messages_are_read_by_chainproxy_unless_ws_direct_is_off(stack: Stack) -> None:
    """On a plain-text socket the proxy reads the client's frames itself (the
    fast path, addon/mitm/ws_reads.py): the same answers, a ping's pong, and
    a close handed back to mitmproxy, which ends the socket with the closing
    handshake (tests/e2e/test_ws_fuzz_e2e.py sends every other kind of
    frame). With ``chainproxy_ws_direct`` off every message goes through
    mitmproxy's WebSocket layer. The sidecar's ``chainproxy_ws_messages_total``
    says which path read them."""
    path = "mitmproxy" if "chainproxy_ws_direct=false" in stack.sets_in_force() else "direct"
    sample = f'chainproxy_ws_messages_total{{network="finney",path="{path}"}}'
    before = await _metric(stack, sample)
    async with connect(stack) as ws:
        for i in range(5):
            got = await ask(ws, call("chain_getBlockHash", [i], id_=f"d{i}"))
            assert got["id"] == f"d{i}" and got["result"].startswith("0x"), got
        await ws.ping(b"are you there")  # aiohttp answers pongs itself; the call after still works
        got = await ask(ws, call("system_health", id_="after-ping"))
        assert got["id"] == "after-ping", got
    deadline = asyncio.get_running_loop().time() + 30
    while (n := await _metric(stack, sample)) < before + 6:
        assert asyncio.get_running_loop().time() < deadline, (sample, before, n)
        await asyncio.sleep(0.5)


async def _metric(stack: Stack, sample: str) -> float:
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{stack.sidecar_url}/metrics") as r:
            text = await r.text()
    for line in text.splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_websocket_calls_are_counted_in_usage_and_served_from_the_cache(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Usage records and the edge cache are the HTTP pipeline's: a call over
    WebSocket counts once, a refusal not at all, a block-pinned read repeated is
    a cache hit."""
    from tests.e2e.harness import http_json
    from tests.e2e.helpers import build_stack

    s = build_stack(
        tmp_path_factory.mktemp("ws-usage"),
        ("alpha", "beta"),
        top={"probe": {"interval_s": 1, "head_interval_s": 0.5, "timeout_s": 1}},
        usage={"flush_s": 0.5},
    )
    try:
        block = s.nodes[0].rpc("chain_getBlockHash", [3])["result"]
        async with connect(s) as ws:
            for i in range(4):  # the same block 4 times: 1 miss, 3 hits
                got = await ask(ws, call("chain_getHeader", [block], id_=i))
                assert got["result"]["number"] == "0x3", got
            refused = await ask(ws, call("author_submitExtrinsic", ["0x00"], id_=9))
            assert refused["error"]["code"] == -32601
        doc: dict[str, Any] = {}
        for _ in range(60):
            doc = http_json(f"{s.proxy_url}/api/v1/usage")
            if doc["requests"] >= 4:
                break
            await asyncio.sleep(0.3)
        assert doc["requests"] == 4, doc  # the refusal is not a proxied call
        assert doc["cache_hits"]["count"] == 3, doc
    finally:
        s.stop()
