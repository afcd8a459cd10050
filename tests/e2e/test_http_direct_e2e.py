"""Direct HTTP reads (``chainproxy_http_direct``) through real mitmdumps: after
a first call on a kept-alive connection, chainproxy reads the next POSTs
itself; every answer is the one mitmproxy's path gives (the same bytes but for
ids, quota and upstream values: a second proxy with the option off answers the
same requests), whether read directly or handed back (other paths, methods,
upgrades, HTTP/1.0, Expect, chunked and oversized bodies, malformed heads),
pipelined or split; and the bounds hold (408, 413, 431, idle closing)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import aiohttp
import pytest

from tests.e2e.harness import Stack
from tests.e2e.helpers import DIRECT_ON, build_stack, call
from tests.e2e.http_raw import CLOSED, Raw, masked, port_of, post, start_direct_off

pytestmark = pytest.mark.e2e

READ_TIMEOUT_S = 2.0
MAX_BODY = 4096


class Pair:
    def __init__(self, stack: Stack, off_url: str) -> None:
        self.stack = stack
        self.on = port_of(stack.proxy_url)
        self.off = port_of(off_url)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    s = build_stack(
        tmp_path_factory.mktemp("http-direct"),
        ("alpha", "beta"),
        sets=DIRECT_ON,  # on, whatever a check run gives every proxy (CHAINPROXY_TEST_SETS)
        rate_limit={"requests": 10_000_000, "window_s": 60},
        max_body_bytes=MAX_BODY,
        max_batch=5,
        read_timeout_s=READ_TIMEOUT_S,
    )
    try:
        yield Pair(s, start_direct_off(s))
    finally:
        s.stop()


WARM = post(call("system_health", id_="warm"))


def exchange(port: int, requests: list[bytes], pieces: list[int] | None = None) -> list:
    """A warm-up call (chainproxy takes the connection's reads after it), then
    ``requests`` sent in one go (pipelined; cut at ``pieces``), every answer."""
    c = Raw(port)
    try:
        c.send(WARM)
        assert b"200 OK" in c.response()
        data = b"".join(requests)
        c.send(data, pieces, gap_s=0.002 if pieces else 0.0)
        out = []
        for _ in requests:
            r = c.response(timeout=3.0)
            out.append(masked(r))
            if r == CLOSED:
                break
        return out
    finally:
        c.close()


CALLS = [
    post(call("chain_getBlockHash", [3], id_=1), headers="X-Request-Id: mine-1\r\n"),
    post(call("chain_getBlockHash", [3], id_="two")),  # a hit
    post([call("chain_getBlockHash", [4], id_=3), call("system_health", id_=4)]),
    post(call("author_submitExtrinsic", ["0x00"], id_=5)),  # refused: 403
    post(b'{"jsonrpc":"2.0","id":6,"method":'),  # parse error
    post(b"[" + b",".join([b'{"jsonrpc":"2.0","id":1,"method":"system_health"}'] * 6) + b"]"),
    post({"jsonrpc": "2.0", "method": "system_health"}),  # a notification
    post(call("system_health", id_=7), headers="X-Forwarded-For: 10.0.0.1\r\n"),
    post(call("system_health", id_=8), headers="Connection: keep-alive\r\n"),
]


def test_answers_are_mitmproxys_one_by_one_pipelined_and_split(pair: Pair) -> None:
    one_by_one_on = [exchange(pair.on, [r])[0] for r in CALLS]
    one_by_one_off = [exchange(pair.off, [r])[0] for r in CALLS]
    assert one_by_one_on == one_by_one_off
    # both caches warm now: every answer a hit, the same on both
    pipelined = exchange(pair.off, CALLS)
    assert exchange(pair.on, CALLS) == pipelined  # in order
    cuts = list(range(1, sum(map(len, CALLS)), 37))
    assert exchange(pair.on, CALLS, cuts) == pipelined


HANDED_BACK = [
    post(call("system_health", id_=1), network="nowhere"),  # 404
    b"OPTIONS /rpc/v1/finney HTTP/1.1\r\nHost: x\r\n\r\n",  # preflight
    b"GET /rpc/v1/finney HTTP/1.1\r\nHost: x\r\n\r\n",  # 405
    b"GET /api/v1/internal/usage HTTP/1.1\r\nHost: x\r\n\r\n",  # 404
    b"POST /rpc/v1/finney HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"12\r\n" + b'{"jsonrpc":"2.0","' + b"\r\n1f\r\n" + b'id":1,"method":"system_health"}'
    b"\r\n0\r\n\r\n",
    post(call("system_health", id_=2), headers="Expect: 100-continue\r\n"),
    post(b"x" * (MAX_BODY + 1)),  # 413, closed
    b"POST /rpc/v1/finney HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n{}",
    b"POST /rpc/v1/finney HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}",
    post(call("system_health", id_=3), headers="Connection: close\r\n"),
    b"POST /rpc/v1/finney HTTP/1.1\r\nBad Header\r\n\r\n",  # 400
    # an upgrade on a POST (httptools raises its own error for these: it once
    # crashed the connection's handler)
    post(call("system_health", id_=4), headers="Connection: Upgrade\r\nUpgrade: h2c\r\n"),
    post(
        call("system_health", id_=5),
        headers="Connection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n",
    ),
]


@pytest.mark.parametrize("request_bytes", HANDED_BACK, ids=range(len(HANDED_BACK)))
def test_what_chainproxy_does_not_take_is_answered_by_mitmproxy(
    pair: Pair, request_bytes: bytes
) -> None:
    follow = post(call("system_health", id_="after"))
    on = exchange(pair.on, [request_bytes, follow])
    off = exchange(pair.off, [request_bytes, follow])
    assert on == off
    assert on[0][0].startswith(b"HTTP/1.")


def test_a_websocket_upgrade_after_a_post_is_mitmproxys(pair: Pair) -> None:
    upgrade = (
        b"GET /rpc/v1/finney HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    got = exchange(pair.on, [upgrade])
    assert got[0][0] == b"HTTP/1.1 101 Switching Protocols", got


def test_a_slow_body_gets_the_408_and_the_connection_closes(pair: Pair) -> None:
    c = Raw(pair.on)
    c.send(WARM)
    assert b"200 OK" in c.response()
    whole = post(call("system_health", id_=1))
    started = time.monotonic()
    c.send(whole[:-5])
    r = c.response(timeout=READ_TIMEOUT_S + 3)
    assert r.startswith(b"HTTP/1.1 408"), r
    assert READ_TIMEOUT_S - 0.2 <= time.monotonic() - started < READ_TIMEOUT_S + 2
    assert c.wait_closed(2)


def test_a_request_handed_back_keeps_the_time_since_its_first_byte(pair: Pair) -> None:
    """A head trickled in, then found unusual (chunked) and handed to
    mitmproxy: the 408 comes ``read_timeout_s`` after its first byte, as on
    mitmproxy's path, not after the hand-back."""
    c = Raw(pair.on)
    c.send(WARM)
    assert b"200 OK" in c.response()
    started = time.monotonic()
    c.send(b"POST /rpc/v1/finney HTTP/1.1\r\nHost: x\r\n")
    time.sleep(READ_TIMEOUT_S * 0.7)
    c.send(b"Transfer-Encoding: chunked\r\n\r\n5\r\n{")  # handed back here
    r = c.response(timeout=READ_TIMEOUT_S + 3)
    assert r.startswith(b"HTTP/1.1 408"), r
    assert READ_TIMEOUT_S - 0.2 <= time.monotonic() - started < READ_TIMEOUT_S * 1.5
    assert c.wait_closed(2)


def test_a_long_head_gets_the_431(pair: Pair) -> None:
    c = Raw(pair.on)
    c.send(WARM)
    assert b"200 OK" in c.response()
    c.send(b"POST /rpc/v1/finney HTTP/1.1\r\nX: " + b"a" * 70000)
    r = c.response()
    assert r.startswith(b"HTTP/1.1 431"), r[:100]
    assert c.wait_closed(2)


def test_an_idle_connection_is_closed_after_twice_the_read_timeout(pair: Pair) -> None:
    c = Raw(pair.on)
    c.send(WARM)
    assert b"200 OK" in c.response()
    for i in range(3):  # direct requests keep it busy, then it idles
        c.send(post(call("system_health", id_=i)))
        assert b"200 OK" in c.response()
    started = time.monotonic()
    assert c.wait_closed(2 * READ_TIMEOUT_S + 3)
    assert 2 * READ_TIMEOUT_S - 0.3 <= time.monotonic() - started


async def _metric(stack: Stack, sample: str) -> float:
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{stack.sidecar_url}/metrics") as r:
            text = await r.text()
    for line in text.splitlines():
        if line.startswith(sample + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_direct_calls_are_counted(pair: Pair) -> None:
    sample = 'chainproxy_http_direct_requests_total{network="finney"}'
    before = await _metric(pair.stack, sample)
    await asyncio.to_thread(
        exchange, pair.on, [post(call("system_health", id_=i)) for i in range(5)]
    )
    deadline = time.monotonic() + 30
    while (n := await _metric(pair.stack, sample)) < before + 5:
        assert time.monotonic() < deadline, (before, n)
        await asyncio.sleep(0.5)
