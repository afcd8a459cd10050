"""Slow and oversized clients against the real proxy: bounded in time and size.

* A request (head and body) must arrive within ``proxy.read_timeout_s`` of its
  first byte: a body or head sent a few bytes a second, or not at all, gets a
  JSON-RPC 408 and its connection is closed; a slow request within the bound is
  answered as usual.
* Hundreds of connections trickling heads leave other clients served, and
  their file descriptors come back once they are closed (by the client or by
  the bound).
* A body over ``proxy.max_body_bytes`` gets the contract's JSON 413, chunked
  or not, and mitmproxy stops reading near the limit (the client cannot even
  send most of it); the socket is closed, never left open.
* A request head over 64 KiB gets a JSON-RPC 431.

Every wait is bounded; times are asserted only as "not before the bound" and
"within a generous multiple of it"."""

from __future__ import annotations

import asyncio
import json
import os
import select
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import Stack
from tests.e2e.helpers import build_stack, call, post

pytestmark = pytest.mark.e2e

READ_TIMEOUT_S = 5
LIMIT = 65536
BODY = json.dumps(call("system_health", id_=1)).encode()


@pytest.fixture(scope="module")
def sstack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = build_stack(
        tmp_path_factory.mktemp("slow"),
        ("alpha", "beta"),
        sets=("termlog_verbosity=warn",),
        rate_limit={"requests": 10_000_000, "window_s": 60},
        max_body_bytes=LIMIT,
        read_timeout_s=READ_TIMEOUT_S,
    )
    yield s
    s.stop()


def port_of(stack: Stack) -> int:
    return int(stack.proxy_url.rsplit(":", 1)[1])


def pid_of(stack: Stack) -> int:
    assert stack.proxy is not None
    return stack.proxy.popen.pid


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def head(length: int | None = None, *, chunked: bool = False) -> bytes:
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {length}"
    return (
        f"POST /rpc/v1/finney HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"{framing}\r\n\r\n"
    ).encode()


def parse(raw: bytes) -> tuple[int, dict[str, str], Any]:
    """Status, headers and JSON body of the one answer in ``raw``."""
    top, _, body = raw.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    length = int(headers.get("content-length", len(body)))
    try:
        doc = json.loads(body[:length])
    except ValueError:
        doc = None
    return int(lines[0].split()[1]), headers, doc


async def read_all(reader: asyncio.StreamReader, timeout: float) -> bytes:
    """Everything until the proxy closes (a reset after its answer counts as a close)."""
    data = b""
    try:
        async with asyncio.timeout(timeout):
            while chunk := await reader.read(65536):
                data += chunk
    except ConnectionResetError:
        pass
    return data


async def wait_fds(pid: int, at_most: int, timeout: float = 20, *, at_least: int = 0) -> int:
    """The proxy's fd count once it is within [at_least, at_most] (or the timeout passed)."""
    deadline = time.monotonic() + timeout
    n = fd_count(pid)
    while not at_least <= n <= at_most and time.monotonic() < deadline:
        await asyncio.sleep(0.2)  # polling another process: there is nothing to wait on
        n = fd_count(pid)
    return n


def assert_json_error(raw: bytes, status: int) -> dict[str, Any]:
    got, headers, doc = parse(raw)
    assert got == status, raw[:300]
    assert headers.get("content-type") == "application/json", raw[:300]
    assert headers.get("connection", "").lower() == "close", raw[:300]
    assert doc["jsonrpc"] == "2.0" and doc["id"] is None, doc
    assert doc["error"]["code"] == -32600, doc
    return doc


# --- 1. slow bodies -------------------------------------------------------------------


async def _trickle(writer: asyncio.StreamWriter, data: bytes, every: float) -> None:
    """Send ``data`` a byte at a time; stops quietly once the proxy has closed."""
    try:
        for i in range(len(data)):
            writer.write(data[i : i + 1])
            await writer.drain()
            await asyncio.sleep(every)
    except (ConnectionError, OSError):
        pass


async def _slow_request(port: int, first: bytes, rest: bytes, every: float) -> tuple[bytes, float]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    try:
        writer.write(first)
        await writer.drain()
        trickle = asyncio.create_task(_trickle(writer, rest, every))
        raw = await read_all(reader, READ_TIMEOUT_S + 25)
        elapsed = time.monotonic() - started
        trickle.cancel()
        return raw, elapsed
    finally:
        writer.close()


async def test_slow_bodies_get_408_at_the_bound_while_others_are_answered(sstack: Stack) -> None:
    port = port_of(sstack)
    chunk = b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY)
    slow = [
        # a Content-Length body, two bytes a second (would take ~30 s)
        _slow_request(port, head(len(BODY)), BODY, 0.5),
        # a chunked body, the same way
        _slow_request(port, head(chunked=True), chunk, 0.5),
        # the head, then silence (mitmproxy alone would wait 600 s)
        _slow_request(port, head(len(BODY)), b"", 0),
        # the head itself, a byte every 0.4 s
        _slow_request(port, b"P", head(len(BODY))[1:] + BODY, 0.4),
    ]
    slow_tasks = [asyncio.create_task(s) for s in slow]
    answered = 0
    while not all(t.done() for t in slow_tasks):
        r = await post(sstack.rpc_url(), call("system_health", id_=answered), timeout=10)
        assert r.status == 200 and r.body["id"] == answered, r.raw[:200]
        answered += 1
        await asyncio.sleep(0.2)
    assert answered >= 5  # others were served all along
    for raw, elapsed in [t.result() for t in slow_tasks]:
        doc = assert_json_error(raw, 408)
        assert doc["error"]["data"] == {"timeout_s": READ_TIMEOUT_S}, doc
        # the bound counts from the first byte the proxy saw, after our clock started
        assert READ_TIMEOUT_S * 0.9 <= elapsed < READ_TIMEOUT_S + 20, elapsed


async def test_a_slow_body_within_the_bound_is_answered(sstack: Stack) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port_of(sstack))
    try:
        writer.write(head(len(BODY)))
        for i in range(0, len(BODY), 10):  # six pieces over ~1 s: well within 5 s
            await asyncio.sleep(0.2)
            writer.write(BODY[i : i + 10])
            await writer.drain()
        async with asyncio.timeout(15):
            raw = await reader.readuntil(b"\r\n\r\n")
            length = int(parse(raw)[1]["content-length"])
            raw += await reader.readexactly(length)
    finally:
        writer.close()
    status, _, doc = parse(raw)
    assert status == 200 and doc["id"] == 1 and "result" in doc, raw[:300]


# --- 2. hundreds of trickled heads -------------------------------------------------------


async def test_hundreds_of_trickled_heads_leave_others_served_and_fds_return(
    sstack: Stack,
) -> None:
    port, pid = port_of(sstack), pid_of(sstack)
    r = await post(sstack.rpc_url(), call("system_health"))
    assert r.status == 200
    await asyncio.sleep(0.5)
    baseline = fd_count(pid)
    request = head(len(BODY)) + BODY  # ~110 bytes: never complete at a byte per round
    conns = [await asyncio.open_connection("127.0.0.1", port) for _ in range(300)]
    readers = [asyncio.create_task(read_all(rd, READ_TIMEOUT_S + 40)) for rd, _ in conns]
    # all held once accepted (an idle connection, no request begun, is left to
    # mitmproxy's tcp_timeout); slack: the proxy's own idle upstream connections
    # may close meanwhile
    held = await wait_fds(pid, 1 << 20, at_least=baseline + 290)
    assert held >= baseline + 290, (baseline, held)

    async def trickle() -> None:
        for i in range(len(request)):
            for (_, writer), done in zip(conns, readers, strict=True):
                if not done.done() and not writer.is_closing():
                    try:
                        writer.write(request[i : i + 1])
                    except (ConnectionError, OSError):
                        pass
            await asyncio.sleep(0.25)

    trickling = asyncio.create_task(trickle())
    answered = 0
    try:
        # others are answered while 300 heads trickle in (until the bound cuts them)
        until = time.monotonic() + READ_TIMEOUT_S - 1
        while time.monotonic() < until or answered < 5:
            r = await post(sstack.rpc_url(), call("system_health", id_=answered), timeout=10)
            assert r.status == 200 and r.body["id"] == answered
            answered += 1
            await asyncio.sleep(0.1)
        # half of them leave by themselves ...
        for _, writer in conns[:150]:
            writer.close()
        # ... the other half are cut by the bound: a 408 each, then closed
        raws = await asyncio.gather(*readers[150:])
    finally:
        trickling.cancel()
        for _, writer in conns:
            writer.close()
    for raw in raws:
        doc = assert_json_error(raw, 408)
        assert doc["error"]["data"]["timeout_s"] == READ_TIMEOUT_S
    # every socket is given back (slack for the proxy's own upstream pools)
    assert await wait_fds(pid, baseline + 6) <= baseline + 6, (baseline, fd_count(pid))
    r = await post(sstack.rpc_url(), call("system_health", id_="after"))
    assert r.status == 200 and r.body["id"] == "after"


# --- 3. bodies over the limit ---------------------------------------------------------


def _push(
    port: int, first: bytes, piece: bytes, total: int, *, wait_s: float = 30
) -> tuple[bytes, int, bool]:
    """Send ``first`` then ``piece`` repeatedly (``total`` bytes of pieces) as
    fast as the proxy takes them, reading its answer meanwhile, until the proxy
    closes or ``wait_s`` passed: the answer, how many piece bytes went out, and
    whether the proxy closed the connection."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
    try:
        s.sendall(first)
        s.setblocking(False)
        sent, answer, pending = 0, b"", b""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            want_write = [s] if sent < total else []
            readable, writable, _ = select.select([s], want_write, [], 1)
            if readable:
                try:
                    chunk = s.recv(65536)
                except ConnectionResetError:
                    return answer, sent, True
                if not chunk:
                    return answer, sent, True
                answer += chunk
            if writable:
                pending = pending or piece
                try:
                    n = s.send(pending)
                except (BrokenPipeError, ConnectionResetError):
                    continue  # closed by the proxy: what it said is still to be read
                pending, sent = pending[n:], sent + n
        return answer, sent, False
    finally:
        s.close()


def test_a_chunked_body_over_the_limit_gets_413_and_is_not_read(sstack: Stack) -> None:
    port, pid = port_of(sstack), pid_of(sstack)
    rss_before = rss_kb(pid)
    payload = b"x" * 65536
    chunk = b"%x\r\n%s\r\n" % (len(payload), payload)
    total = 20 * 1_048_576
    answer, sent, closed = _push(port, head(chunked=True), chunk, total)
    doc = assert_json_error(answer, 413)
    assert closed
    assert doc["error"]["data"] == {"limit": LIMIT}, doc
    assert str(LIMIT) in doc["error"]["message"]
    # mitmproxy stopped reading near the limit: most of the 20 MiB could not
    # even be sent (what went out sits in kernel buffers at most)
    assert sent < total // 2, f"{sent} of {total} bytes were taken"
    assert rss_kb(pid) - rss_before < 16 * 1024


def test_a_chunked_body_over_the_limit_after_100_continue_gets_413(sstack: Stack) -> None:
    """``Expect: 100-continue`` (curl sends it with a chunked body): mitmproxy's
    interim "100 Continue" went out, then the refused body closed the connection
    with no answer at all; the 413 follows the 100 now."""
    payload = b"x" * 65536
    chunk = b"%x\r\n%s\r\n" % (len(payload), payload)
    first = head(chunked=True).replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n")
    answer, _, closed = _push(port_of(sstack), first, chunk, 4 * 1_048_576)
    interim, _, rest = answer.partition(b"\r\n\r\n")
    assert interim.startswith(b"HTTP/1.1 100"), answer[:200]
    doc = assert_json_error(rest, 413)
    assert closed
    assert doc["error"]["data"] == {"limit": LIMIT}, doc


def test_curl_posting_a_large_body_chunked_gets_the_json_413(sstack: Stack, tmp_path: Path) -> None:
    """As a user meets it: curl, a body file over the limit, chunked (curl adds
    ``Expect: 100-continue`` itself; before the fix it got an empty reply)."""
    body = tmp_path / "big.json"
    body.write_bytes(
        b'{"jsonrpc":"2.0","id":1,"method":"system_health","params":["'
        + b"x" * (2 * LIMIT)
        + b'"]}'
    )
    out = subprocess.run(
        [
            "curl", "-s", "-S", "-i", "--max-time", "20", "-H", "Content-Type: application/json",
            "-H", "Transfer-Encoding: chunked", "--data-binary", f"@{body}", sstack.rpc_url(),
        ],
        capture_output=True,
        timeout=30,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    final = out.stdout.rpartition(b"HTTP/1.1 ")[2]  # past the interim 100
    assert final.startswith(b"413"), out.stdout[:300]
    doc = json.loads(final.partition(b"\r\n\r\n")[2])
    assert doc["error"]["code"] == -32600 and doc["error"]["data"] == {"limit": LIMIT}


def test_a_declared_length_over_the_limit_is_refused_before_any_body(sstack: Stack) -> None:
    with socket.create_connection(("127.0.0.1", port_of(sstack)), timeout=15) as s:
        s.sendall(head(20 * 1_048_576))  # the head only: the answer must not wait for a body
        raw = b""
        while chunk := s.recv(65536):
            raw += chunk
    doc = assert_json_error(raw, 413)
    assert doc["error"]["data"] == {"limit": LIMIT}


def read_answer(s: socket.socket) -> bytes:
    """One whole answer (by its Content-Length) from a blocking socket."""
    raw = b""
    while b"\r\n\r\n" not in raw:
        chunk = s.recv(65536)
        if not chunk:
            return raw
        raw += chunk
    want = int(parse(raw)[1].get("content-length", "0"))
    while len(raw.partition(b"\r\n\r\n")[2]) < want:
        chunk = s.recv(65536)
        if not chunk:
            break
        raw += chunk
    return raw


def test_a_chunked_body_within_the_limit_is_answered(sstack: Stack) -> None:
    body = BODY[:-1] + b" " * 50_000 + b"}"  # padded with JSON whitespace, under the limit
    pieces = [body[i : i + 4096] for i in range(0, len(body), 4096)]
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port_of(sstack)), timeout=15) as s:
        s.sendall(head(chunked=True) + chunked)
        raw = read_answer(s)
    status, _, doc = parse(raw)
    assert status == 200 and doc["id"] == 1 and "result" in doc, raw[:300]


def test_a_chunked_body_with_trailer_fields_gets_a_json_400_and_is_closed(sstack: Stack) -> None:
    """Trailer fields after the last chunk (valid HTTP/1.1): mitmproxy raised on
    them, logged a traceback and left the socket open, unanswered, past every
    bound (200 such sockets held 200 descriptors). A JSON 400 now, closed; the
    same on a kept-alive connection after a plain call (read by chainproxy
    itself first, then handed back for the chunked body)."""
    trailer = b"%x\r\n%s\r\n0\r\nX-Trailer: y\r\n\r\n" % (len(BODY), BODY)
    for warm in (False, True):
        with socket.create_connection(("127.0.0.1", port_of(sstack)), timeout=15) as s:
            if warm:
                s.sendall(head(len(BODY)) + BODY)
                assert parse(read_answer(s))[0] == 200
            s.sendall(head(chunked=True) + trailer)
            raw = read_answer(s)
            doc = assert_json_error(raw, 400)
            assert doc["error"]["data"]["policy"] == "request", doc
            assert "trailer" in doc["error"]["message"], doc
            assert s.recv(1) == b"", "the connection was left open"


async def test_refused_bodies_leave_no_socket_open(sstack: Stack) -> None:
    # Was: mitmproxy 12.2.3 closes a client whose body passed body_size_limit
    # while that client's reader waits for the event lock; the cancellation
    # skips the close, and the socket (with its unread bytes) stays open for
    # good, one fd per refused body (measured: ESTAB with 1.7 MB unread) when
    # the client goes on sending until mitmproxy stops reading it.
    port, pid = port_of(sstack), pid_of(sstack)
    assert (await post(sstack.rpc_url(), call("system_health"))).status == 200
    await asyncio.sleep(0.5)
    baseline = fd_count(pid)
    payload = b"y" * 65536
    chunk = b"%x\r\n%s\r\n" % (len(payload), payload)
    big = 4 * 1_048_576
    for _ in range(10):
        for first, piece in ((head(chunked=True), chunk), (head(big), payload)):
            # still sending after the answer, as a client that does not read would
            answer, _, _ = await asyncio.to_thread(_push, port, first, piece, big, wait_s=3)
            assert_json_error(answer, 413)
    # (without the fix about a third of these stay open; nothing here goes upstream)
    assert await wait_fds(pid, baseline + 2) <= baseline + 2, (baseline, fd_count(pid))


# --- 4. request heads over 64 KiB -------------------------------------------------------


def test_a_request_head_over_64_kib_gets_431(sstack: Stack) -> None:
    pid = pid_of(sstack)
    rss_before = rss_kb(pid)
    line = b"X-Padding: " + b"a" * 1000 + b"\r\n"
    answer, sent, closed = _push(
        port_of(sstack), b"POST /rpc/v1/finney HTTP/1.1\r\nHost: x\r\n", line, 16 * 1_048_576
    )
    doc = assert_json_error(answer, 431)
    assert closed
    assert doc["error"]["data"] == {"limit": 65536}
    assert sent < 8 * 1_048_576, sent
    assert rss_kb(pid) - rss_before < 16 * 1024


def test_the_proxy_logged_no_error(sstack: Stack) -> None:
    assert sstack.proxy is not None
    log = sstack.proxy.output()
    bad = [ln for ln in log.splitlines() if any(w in ln for w in ("Traceback", "crashed", "rror"))]
    assert bad == [], log[-3000:]
