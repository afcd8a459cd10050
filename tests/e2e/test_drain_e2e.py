"""Drain on SIGTERM, through a real mitmdump: the calls in flight are all
answered, a WebSocket client is closed with 1001 after its call in flight is
answered and with no notification lost, no new connection is taken, and the
process exits on its own well within ``proxy.drain_s``."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.e2e.harness import Stack, base_config
from tests.e2e.helpers import (
    DIRECT_ON,
    PROXY_DEFAULTS,
    call,
    next_client_ip,
    post,
    wait_until,
    with_wss,
)
from tests.e2e.http_raw import Raw, port_of
from tests.e2e.http_raw import post as raw_post

pytestmark = pytest.mark.e2e


@pytest.fixture(params=[False, True], ids=["mitmproxy-reads", "direct-reads"])
def draining(tmp_path: Any, request: pytest.FixtureRequest) -> Iterator[Stack]:
    s = Stack(tmp_path)
    # direct HTTP reads on or off, whatever a check run gives every proxy
    s.proxy_sets = DIRECT_ON if request.param else ("chainproxy_http_direct=false",)
    try:
        epoch = time.time() - 600
        s.start_nodes(("alpha", "beta"), epoch=epoch, block_time=1.0)
        failover = {**PROXY_DEFAULTS["failover"], "attempt_timeout_s": 3, "deadline_s": 5}
        proxy = {**PROXY_DEFAULTS, "failover": failover}
        config = with_wss(base_config(tmp_path, s.nodes, **proxy, drain_s=8))
        s.write_config(config)
        s.start_sidecar()
        s.start_proxy()
        yield s
    finally:
        s.stop()


def _storage_calls(stack: Stack) -> int:
    """``state_getStorage`` calls the nodes received (counted as they arrive)."""
    return sum(n.state()["calls"].get("state_getStorage", 0) for n in stack.nodes)


async def _reached(stack: Stack, count: int) -> bool:
    # off the loop: the calls' own connections are still being written
    return await asyncio.to_thread(_storage_calls, stack) >= count


async def test_sigterm_answers_what_is_in_flight_and_says_going_away(draining: Stack) -> None:
    stack = draining
    ws_url = stack.rpc_url().replace("http://", "ws://")
    for n in stack.nodes:
        n.control(latency_ms=800)  # calls stay in flight long enough to be caught
    async with aiohttp.ClientSession() as s, s.ws_connect(ws_url) as ws:
        await ws.send_str(json.dumps(call("chain_subscribeNewHeads", id_=1)))
        heads: list[int] = []
        answers: dict[int, Any] = {}
        close_code: list[int | None] = []

        async def read() -> None:
            async for msg in ws:
                doc = json.loads(msg.data)
                if doc.get("method") == "chain_newHead":
                    heads.append(int(doc["params"]["result"]["number"], 16))
                else:
                    answers[doc["id"]] = doc
            close_code.append(ws.close_code)

        reader = asyncio.create_task(read())
        async with asyncio.timeout(10):
            while not heads:  # noqa: ASYNC110 - the reader task fills it
                await asyncio.sleep(0.05)
        before = _storage_calls(stack)
        ips = [next_client_ip() for _ in range(20)]
        calls = [
            asyncio.create_task(
                post(stack.rpc_url(), call("state_getStorage", [f"0x{i:064x}"]), client_ip=ip)
            )
            for i, ip in enumerate(ips)
        ]
        await ws.send_str(json.dumps(call("state_getStorage", ["0x" + "ee" * 32], id_=2)))
        # all of them reached the proxy and wait on the nodes (not a fixed time: on a
        # loaded machine a connection still in the listener's queue would be refused)
        await wait_until(lambda: _reached(stack, before + 21), 10, "21 calls at the nodes")
        t0 = time.monotonic()
        stack.proxy.popen.send_signal(signal.SIGTERM)
        replies = await asyncio.gather(*calls)
        await asyncio.wait_for(reader, 10)
        assert [r.status for r in replies] == [200] * 20  # every call in flight answered
        assert all("result" in r.body for r in replies)
        assert 2 in answers and "result" in answers[2]  # the socket's call too, before ...
        assert close_code == [1001]  # ... going away (not 1006)
        assert heads == sorted(heads) and len(set(heads)) == len(heads)
    with pytest.raises(aiohttp.ClientError):  # no new connection is taken
        await post(stack.rpc_url(), call("system_health"), timeout=2)
    stack.proxy.popen.wait(timeout=10)
    assert time.monotonic() - t0 < 8 + 2  # on its own, within drain_s


async def test_a_kept_alive_connection_is_told_to_close_with_its_answer(draining: Stack) -> None:
    """The call in flight on a kept-alive connection is answered with
    ``Connection: close`` and the connection ends: its next call goes to
    another proxy (read by chainproxy itself or by mitmproxy alike)."""
    stack = draining
    c = Raw(port_of(stack.proxy_url))
    try:
        c.send(raw_post(call("system_health", id_="warm")))  # chainproxy takes the reads after it
        assert b"200 OK" in c.response()
        for n in stack.nodes:
            n.control(latency_ms=800)
        before = _storage_calls(stack)
        c.send(raw_post(call("state_getStorage", ["0x" + "dd" * 32], id_=1)))
        await wait_until(lambda: _reached(stack, before + 1), 10, "the call at a node")
        stack.proxy.popen.send_signal(signal.SIGTERM)
        answer = await asyncio.to_thread(c.response, 5.0)
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), answer[:200]
        assert b"\r\nconnection: close" in head.lower(), head
        assert b'"result"' in body
        assert await asyncio.to_thread(c.wait_closed, 5.0)
    finally:
        c.close()
    stack.proxy.popen.wait(timeout=10)
