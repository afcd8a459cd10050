"""JSON-RPC over WebSocket edge cases, end to end (real mitmdump + addon,
simulated nodes, the sidecar; everything on 127.0.0.1, every wait bounded).

Tests whose comment starts "Was:" reproduce a defect an independent review
found (each failed before its fix); the others pin
behaviour that tests/e2e/test_websocket_e2e.py does not check."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest

from tests.e2e.harness import BIN, REPO, Stack, base_config, free_port, spawn, wait_http
from tests.e2e.helpers import (
    PROXY_DEFAULTS,
    build_stack,
    call,
    next_client_ip,
    post,
    wait_until,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The usual stack, logging warnings too (mitmdump -q shows errors only)."""
    s = build_stack(
        tmp_path_factory.mktemp("ws-review"),
        ("alpha", "beta", "archive-gamma"),
        sets=("termlog_verbosity=warn",),
    )
    yield s
    s.stop()


def ws_url(stack: Stack, network: str = "finney") -> str:
    return stack.rpc_url(network).replace("http://", "ws://")


@asynccontextmanager
async def connect(
    stack: Stack,
    client_ip: str | None = None,
    *,
    headers: dict[str, str] | None = None,
    compress: int = 0,
) -> AsyncIterator[aiohttp.ClientWebSocketResponse]:
    connector = aiohttp.TCPConnector(local_addr=(client_ip or next_client_ip(), 0))
    async with aiohttp.ClientSession(connector=connector) as s:
        async with s.ws_connect(
            ws_url(stack),
            headers=headers,
            compress=compress,
            timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=5),
        ) as ws:
            yield ws


async def receive_json(ws: aiohttp.ClientWebSocketResponse, timeout: float = 15) -> Any:
    msg = await asyncio.wait_for(ws.receive(), timeout)
    assert msg.type == aiohttp.WSMsgType.TEXT, msg
    return json.loads(msg.data)


async def raw_exchange(stack: Stack, request: bytes, timeout: float = 10) -> bytes:
    """One raw HTTP/1.1 request; the bytes of the answer (up to the close or 64 KiB)."""
    host, port = stack.proxy_url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await asyncio.wait_for(reader.read(65536), timeout)
            if not chunk:
                break
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                want = int(line.split(b":", 1)[1])
                while len(body) < want:
                    chunk = await asyncio.wait_for(reader.read(65536), timeout)
                    if not chunk:
                        break
                    body += chunk
        return head + b"\r\n\r\n" + body
    finally:
        writer.close()


def _head_and_json(raw: bytes) -> tuple[int, dict[str, str], Any]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    return status, headers, doc


# --- the wire contract for handshakes -------------------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [
        b"",  # no Sec-WebSocket-Key / -Version at all
        b"Sec-WebSocket-Key: not-a-nonce\r\nSec-WebSocket-Version: 13\r\n",
    ],
    ids=["no-key", "bad-key"],
)
async def test_a_malformed_handshake_gets_a_json_rpc_error(stack: Stack, extra: bytes) -> None:
    # Was: addon/hooks/websocket.py request/_take_handshake (lines 110-132) send every
    # GET carrying "Upgrade: websocket" + "Connection: upgrade" on an RPC path to
    # the sink, valid handshake or not. aiohttp refuses a bad one with its own
    # "400 Bad Request", text/plain ("Unsupported version: "), and a
    # "Server: Python/3.12 aiohttp/3.14.5" header, relayed as is. Before the
    # WebSocket addon this request was the contract's JSON-RPC error (GET on an
    # RPC path: 405 -32600, Allow: POST); the wire contract: every error body
    # is a JSON-RPC 2.0 error object. Expected: a 4xx JSON-RPC error body with
    # application/json. Fix: only take handshakes that wsproto/aiohttp would
    # accept (Sec-WebSocket-Key present, Version 13), otherwise leave the flow to
    # the gate; or turn a non-101 answer of the sink into a JSON-RPC error in a
    # ``response`` hook.
    raw = await raw_exchange(
        stack,
        b"GET /rpc/v1/finney HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Connection: Upgrade\r\nUpgrade: websocket\r\n" + extra + b"Connection: close\r\n\r\n",
    )
    status, headers, doc = _head_and_json(raw)
    assert 400 <= status < 500, raw
    assert headers.get("content-type") == "application/json", raw
    assert isinstance(doc, dict) and doc.get("jsonrpc") == "2.0" and "error" in doc, raw
    assert doc["error"]["code"] in (-32600, -32601), raw
    assert "aiohttp" not in headers.get("server", ""), raw


async def test_handshakes_off_the_rpc_paths_never_reach_the_sink(stack: Stack) -> None:
    """An upgrade request on a sidecar path, on the internal API or on an RPC
    path with another method is handled like the same request without the
    upgrade: no 101, the usual JSON answers."""
    upgrade = (
        b"Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nConnection: close\r\n"
    )
    internal = await raw_exchange(
        stack, b"GET /api/v1/internal/usage HTTP/1.1\r\nHost: x\r\n" + upgrade + b"\r\n"
    )
    status, _, doc = _head_and_json(internal)
    assert status == 404 and doc["error"]["code"] == -32601, internal
    unknown = await raw_exchange(
        stack, b"GET /rpc/v2/finney HTTP/1.1\r\nHost: x\r\n" + upgrade + b"\r\n"
    )
    status, _, doc = _head_and_json(unknown)
    assert status == 404 and doc["error"]["code"] == -32601, unknown
    body = json.dumps(call("system_health", id_=5)).encode()
    as_post = await raw_exchange(
        stack,
        b"POST /rpc/v1/finney HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + upgrade
        + b"Content-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body,
    )
    status, headers, doc = _head_and_json(as_post)
    assert status == 200 and doc["id"] == 5 and "result" in doc, as_post
    assert headers.get("x-cache") == "MISS"
    sidecar = await raw_exchange(
        stack, b"GET /api/v1/usage HTTP/1.1\r\nHost: x\r\n" + upgrade + b"\r\n"
    )
    status, _, _ = _head_and_json(sidecar)
    assert status != 101, sidecar


# --- messages ------------------------------------------------------------------------------


async def test_binary_empty_nested_and_compressed_messages_are_answered(stack: Stack) -> None:
    """Binary frames are calls like text ones (the answer is text); empty
    messages and absurd nesting get -32700; permessage-deflate clients (browsers,
    the ``websockets`` library) work; the socket stays open throughout."""
    async with connect(stack, compress=15) as ws:
        await ws.send_bytes(json.dumps(call("system_health", id_="bin")).encode())
        got = await receive_json(ws)
        assert got["id"] == "bin" and "result" in got, got
        for empty in (ws.send_str(""), ws.send_bytes(b"")):
            await empty
            got = await receive_json(ws)
            assert got["id"] is None and got["error"]["code"] == -32700, got
        deep = "[" * 100_000 + "]" * 100_000
        await ws.send_str(f'{{"jsonrpc":"2.0","id":3,"method":"system_health","params":{deep}}}')
        got = await receive_json(ws)
        assert got["error"]["code"] == -32700, got
        await ws.send_str(json.dumps(call("system_health", id_="after")))
        got = await receive_json(ws)
        assert got["id"] == "after" and "result" in got, got
        assert not ws.closed


async def test_sockets_of_one_client_share_one_quota_whatever_xff_they_claim(
    stack: Stack,
) -> None:
    """No trusted proxies are configured: X-Forwarded-For on the handshake is
    ignored, so neither extra sockets nor a forged client address buy quota."""
    ip = next_client_ip()
    answers: list[dict[str, Any]] = []
    for k in range(4):
        async with connect(stack, ip, headers={"X-Forwarded-For": f"198.51.100.{k + 1}"}) as ws:
            for i in range(25):
                await ws.send_str(json.dumps(call("system_health", id_=f"{k}-{i}")))
            for _ in range(25):
                answers.append(await receive_json(ws))
    assert all("result" in a for a in answers), [a for a in answers if "error" in a][:3]
    # the client is over its quota now: a new socket's handshake is refused (429),
    # whatever address it claims
    with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
        async with connect(stack, ip, headers={"X-Forwarded-For": "198.51.100.99"}):
            pass
    assert refused.value.status == 429
    assert int(refused.value.headers["Retry-After"]) >= 1


async def test_client_leaving_with_many_calls_in_flight_is_quiet(stack: Stack) -> None:
    """More calls in flight than MAX_IN_FLIGHT, then the client vanishes: no
    error or warning in mitmdump's log, and the proxy keeps serving."""
    assert stack.proxy is not None
    start = len(stack.proxy.output())

    def upstream() -> int:  # (the sidecar's probes ask for blocks 0 and 1 too, a few)
        return sum(n.state()["calls"].get("chain_getBlockHash", 0) for n in stack.nodes)

    before = upstream()
    for node in stack.nodes:
        node.control(latency_ms=300)
    async with connect(stack) as ws:
        for i in range(90):
            await ws.send_str(json.dumps(call("chain_getBlockHash", [i], id_=i)))
    # the calls really were in flight upstream when the client left ...
    await wait_until(lambda: upstream() >= before + 10, 10, "calls in flight upstream")
    # ... and every one was answered into the void (or cancelled): a call to each
    # node, 300 ms late too, is answered after every call that came before it
    await asyncio.gather(*(asyncio.to_thread(n.rpc, "system_health") for n in stack.nodes))
    for node in stack.nodes:
        node.control(latency_ms=0)
    async with connect(stack) as ws:
        await ws.send_str(json.dumps(call("system_health", id_="next")))
        got = await receive_json(ws)
    assert got["id"] == "next" and "result" in got
    r = await post(stack.rpc_url(), call("system_health"))
    assert r.status == 200
    log = stack.proxy.output()[start:]
    noisy = [
        ln
        for ln in log.splitlines()
        if any(w in ln.lower() for w in ("error", "traceback", "warn", "not from a live"))
    ]
    assert noisy == [], log[-3000:]


# --- back-pressure ---------------------------------------------------------------------------


# a method the sidecar's probes never call, with distinct params (identical calls
# would share one upstream call): the node counts each of ours
METHOD = "state_getKeysPaged"


def _rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return -1


# a pump of 1 MiB messages that moved no MiB for this long is stuck: the proxy no
# longer reads the socket (one that reads takes a few ms a MiB)
STALL_S = 3.0


async def test_past_64_calls_in_flight_the_proxy_stops_reading_the_socket(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # Was: addon/hooks/websocket.py websocket_message (line 152, ``await
    # conn.slots.acquire()``) is meant as back-pressure: README, SECURITY.md
    # ("Bounds": "64 per socket (then the proxy stops reading that socket)") and
    # the module docstring say mitmproxy stops reading the client. It does not:
    # a blocking hook only pauses the WebSocket *layer*; mitmproxy's
    # ConnectionHandler.handle_connection keeps reading the socket and queues
    # every DataReceived event in Layer._paused_event_queue, without a bound.
    # Reproduce: one upstream that hangs (long deadline), 64 calls on a socket,
    # then 48 MiB more; expected: the client's sends block once the kernel
    # buffers (a few MiB) are full. Actual: all 48 MiB are accepted at once and
    # mitmdump's RSS grows by about as much (measured 86 -> 135 MiB; 200 MiB sent
    # -> 287 MiB RSS). Fix: real flow control, e.g. pause the client transport
    # (``transport.pause_reading()``) while a socket is over its bound, or
    # answer calls past the bound with an error / close the socket (1008/1013).
    s = build_stack(
        tmp_path_factory.mktemp("ws-backpressure"),
        ("alpha",),
        sets=("termlog_verbosity=warn",),
        failover={
            "max_attempts": 1,
            "attempt_timeout_s": 60,
            "deadline_s": 60,
            "eject_after": 100,
            "eject_cooldown_s": 1,
        },
    )
    try:
        assert s.proxy is not None
        s.nodes[0].control(hang=True)
        total_mib = 48
        sent = 0
        async with connect(s) as ws:
            for i in range(64):  # fills every in-flight slot: all hang upstream
                await ws.send_str(json.dumps(call(METHOD, [f"0x{i:04x}", 1], id_=i)))
            await wait_until(
                lambda: s.nodes[0].state()["calls"].get(METHOD, 0) >= 64,
                10,
                "the 64 calls hang at the node",
            )
            rss_before = _rss_mib(s.proxy.popen.pid)
            chunk = "x" * (1 << 20)

            async def pump() -> None:
                nonlocal sent
                for _ in range(total_mib):
                    await ws.send_str(chunk)
                    sent += 1

            # 48 MiB take well under a second to a socket that is read. The expected
            # outcome: the proxy stopped reading, the kernel's buffers filled and the
            # pump is stuck: no MiB more for STALL_S (or not done after 8 s, as before)
            pumping = asyncio.create_task(pump())
            deadline = time.monotonic() + 8
            last, moved_at = -1, time.monotonic()
            while not pumping.done() and time.monotonic() < deadline:
                if sent != last:
                    last, moved_at = sent, time.monotonic()
                elif time.monotonic() - moved_at >= STALL_S:
                    break
                await asyncio.sleep(0.05)
            pumping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pumping
            rss_after = _rss_mib(s.proxy.popen.pid)  # for the message only
            s.nodes[0].reset()  # hung calls fail now; let the socket drain and close
            for _ in range(64 + sent):
                try:
                    await asyncio.wait_for(ws.receive(), 10)
                except TimeoutError:
                    break
        assert sent < total_mib, (
            f"all {sent} MiB were read while 64 calls were in flight; "
            f"mitmdump RSS {rss_before} -> {rss_after} MiB"
        )
    finally:
        s.stop()


# --- hot reload ------------------------------------------------------------------------------


async def _answered(stack: Stack) -> bool:
    try:
        r = await post(stack.rpc_url(), call("system_health"), timeout=5)
    except (aiohttp.ClientError, TimeoutError):
        return False  # mid-reload
    return r.status == 200 and "result" in r.body


def _start_proxy_from(stack: Stack, script: os.PathLike[str]) -> None:
    """Stack.start_proxy, with the entry script at another path (a copy we may
    touch to make mitmproxy hot-reload it, leaving the repository alone)."""
    assert stack.config_path is not None
    port = free_port()
    argv = [
        str(BIN / "mitmdump"),
        "-s",
        str(script),
        "--mode",
        f"reverse:{stack.config['sidecar']['url']}",
        "--listen-host",
        "127.0.0.1",
        "--listen-port",
        str(port),
        "--set",
        f"chainproxy_config={stack.config_path}",
        "--set",
        "termlog_verbosity=info",
        "--set",
        "flow_detail=0",
    ]
    proc = spawn("mitmdump", argv, stack.tmp)
    stack.procs.append(proc)
    stack.proxy = proc
    stack.proxy_url = f"http://127.0.0.1:{port}"
    wait_http(f"{stack.proxy_url}/rpc/", proc)


async def test_a_socket_open_across_a_hot_reload_is_answered_or_closed(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # Was: addon/hooks/websocket.py done (lines 203-210) + websocket_message (139-142)
    # + Sink.close (81-88). On a hot reload of the entry script, the old addon's
    # ``done`` forgets every socket and "closes" its sink, whose cleanup waits
    # for handlers that never end; the new addon does not know the socket. From
    # then on the client's calls are relayed to the old sink and swallowed: no
    # answer, no close, the client hangs (until its own timeout). Expected
    # ("open connections to it end, and their clients reconnect"): an answer or
    # a closed socket. HTTP and new sockets are fine after the reload.
    tmp = tmp_path_factory.mktemp("ws-reload")
    s = Stack(tmp)
    try:
        s.start_node("alpha", epoch=time.time() - 600)
        s.write_config(base_config(tmp, s.nodes, **PROXY_DEFAULTS))
        s.start_sidecar()
        script = tmp / "rpcproxy.py"
        shutil.copy(REPO / "addon" / "rpcproxy.py", script)
        _start_proxy_from(s, script)
        assert s.proxy is not None
        outcome: Any = None
        async with connect(s) as ws:
            await ws.send_str(json.dumps(call("system_health", id_=1)))
            first = await receive_json(ws)
            assert first["id"] == 1 and "result" in first
            loads = s.proxy.output().count("Loading script")
            later = time.time() + 5
            os.utime(script, (later, later))  # mitmproxy's watcher reloads on a newer mtime
            await wait_until(
                lambda: s.proxy.output().count("Loading script") > loads, 10, "a reload happened"
            )
            # the new addons are configured and running: they answer an HTTP call
            await wait_until(
                lambda: _answered(s), 10, "the reloaded addon answers over HTTP", step=0.2
            )
            try:
                await ws.send_str(json.dumps(call("system_health", id_=2)))
                outcome = await asyncio.wait_for(ws.receive(), 8)
            except TimeoutError:
                outcome = None
            except aiohttp.ClientConnectionResetError:
                outcome = "closed"  # the old sink closed it (1012): the client reconnects
        # the reloaded addon itself serves new sockets and HTTP
        async with connect(s) as ws2:
            await ws2.send_str(json.dumps(call("system_health", id_=3)))
            fresh = await receive_json(ws2)
        assert fresh["id"] == 3 and "result" in fresh
        assert (await post(s.rpc_url(), call("system_health"))).status == 200
        assert outcome is not None, (
            "a call on a socket opened before the reload: no answer, no close"
        )
    finally:
        s.stop()
