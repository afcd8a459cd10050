"""Raw WebSocket frames against the real proxy: generated
sequences (hypothesis) of whole and fragmented messages, text and binary,
pings, pongs, closes and protocol violations, each with its defined outcome:

* every complete message gets one JSON-RPC answer (a text frame; binary
  messages too), every ping a pong with its payload; a message over
  ``proxy.max_body_bytes`` gets the error a POST of it would (-32600, "body
  too large: N bytes, the limit is L", id null) and the socket stays open;
* a protocol violation (reserved opcode or RSV bit, an unmasked client frame,
  a control frame over 125 bytes or fragmented, a continuation out of place, a
  length in a longer form than needed, a malformed close) → close 1002; text
  that is not UTF-8 (or a close reason that is not) → close 1007; a client's
  own close is echoed with its code;
* the proxy keeps serving: a normal call afterwards is answered, its log
  shows no error.

Deterministic tests add a 64 MiB message (answered, and the proxy's memory
does not grow by it), a message in 5000 fragments and a ping flood.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import select
import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.e2e.harness import Stack
from tests.e2e.helpers import build_stack, call, post

pytestmark = pytest.mark.e2e

LIMIT = 65536  # proxy.max_body_bytes of this stack: also the WebSocket message limit
EXAMPLES = 200  # ~10 s here
TEXT, BINARY, CONT, CLOSE, PING, PONG = 0x1, 0x2, 0x0, 0x8, 0x9, 0xA


@pytest.fixture(scope="module")
def wstack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = build_stack(
        tmp_path_factory.mktemp("ws-fuzz"),
        ("alpha",),
        sets=("termlog_verbosity=warn",),
        rate_limit={"requests": 10_000_000, "window_s": 60},
        max_body_bytes=LIMIT,
    )
    yield s
    s.stop()


# --- a raw client -------------------------------------------------------------------------


def encode(
    opcode: int,
    payload: bytes,
    *,
    fin: bool = True,
    rsv: int = 0,
    masked: bool = True,
    long_form: bool = False,
) -> bytes:
    """One client frame (RFC 6455 5.2); ``long_form`` spends 8 length bytes where
    fewer would do (a violation), ``masked=False`` leaves out the client mask (one too)."""
    first = (0x80 if fin else 0) | (rsv << 4) | opcode
    n = len(payload)
    mask_bit = 0x80 if masked else 0
    if long_form:
        head = bytes((first, mask_bit | 127)) + struct.pack("!Q", n)
    elif n < 126:
        head = bytes((first, mask_bit | n))
    elif n < 65536:
        head = bytes((first, mask_bit | 126)) + struct.pack("!H", n)
    else:
        head = bytes((first, mask_bit | 127)) + struct.pack("!Q", n)
    if not masked:
        return head + payload
    key = os.urandom(4)
    return head + key + mask(payload, key)


def mask(payload: bytes, key: bytes) -> bytes:
    n = len(payload)
    keys = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(keys, "big")).to_bytes(n, "big")


def close_payload(code: int, reason: bytes = b"") -> bytes:
    return struct.pack("!H", code) + reason


class RawWs:
    """A WebSocket client that sends whatever bytes it is given."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=15)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET /rpc/v1/finney HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                f"Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            assert chunk, "closed during the handshake"
            self.buf += chunk
        top, _, self.buf = self.buf.partition(b"\r\n\r\n")
        assert top.startswith(b"HTTP/1.1 101"), top
        self.closed = False

    def send(self, data: bytes) -> bool:
        """False once the proxy has closed (what it sent before is still readable)."""
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False

    def frame(self, deadline: float) -> tuple[int, bytes] | None:
        """The next whole server frame (opcode, payload), continuations joined;
        None when the connection ended or the deadline passed."""
        parts: list[bytes] = []
        opcode = None
        while True:
            got = self._one(deadline)
            if got is None:
                return None
            fin, op, payload = got
            if op >= 0x8:
                return op, payload  # control frames may come between fragments
            opcode = op if opcode is None else opcode
            parts.append(payload)
            if fin:
                return opcode, b"".join(parts)

    def _one(self, deadline: float) -> tuple[bool, int, bytes] | None:
        while True:
            if len(self.buf) >= 2:
                b0, b1 = self.buf[0], self.buf[1]
                assert not b1 & 0x80, "a server frame is never masked"
                n, at = b1 & 0x7F, 2
                if n == 126 and len(self.buf) >= 4:
                    n, at = struct.unpack("!H", self.buf[2:4])[0], 4
                elif n == 127 and len(self.buf) >= 10:
                    n, at = struct.unpack("!Q", self.buf[2:10])[0], 10
                if n < 126 or at > 2:
                    if len(self.buf) >= at + n:
                        payload, self.buf = self.buf[at : at + n], self.buf[at + n :]
                        return bool(b0 & 0x80), b0 & 0x0F, payload
            if self.closed:
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if not select.select([self.sock], [], [], left)[0]:
                return None
            try:
                chunk = self.sock.recv(1 << 20)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                self.closed = True
            self.buf += chunk

    def close(self) -> None:
        self.sock.close()


# --- generated plans and what each must get -----------------------------------------------


@dataclass
class Plan:
    wire: list[bytes] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)  # calls that must be answered with a result
    junk: int = 0  # messages that must get a parse error (id null)
    too_large: int = 0  # messages that must get "body too large" (id null)
    pongs: list[bytes] = field(default_factory=list)
    close: int | None = None  # the close code the proxy must send (None: it stays open)
    what: list[str] = field(default_factory=list)

    def add(self, frames: list[bytes], what: str, effect: Any = None) -> None:
        self.wire += frames
        self.what.append(what)
        if self.close is not None:
            return  # past the first close or violation: sent, and nothing else happens
        if isinstance(effect, int):
            self.close = effect
        elif callable(effect):
            effect(self)


def _pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    pieces = [data[a:b] for a, b in itertools.pairwise(points)]
    return pieces or [b""]


def _fragments(
    opcode: int, data: bytes, cuts: list[int], pings: list[bytes]
) -> tuple[list[bytes], list[bytes]]:
    """One message as frames (the first ``opcode``, then continuations), a ping
    between fragments as ``pings`` says (RFC 6455 5.4 allows it); the frames and
    the pings sent."""
    pieces = _pieces(data, cuts)
    frames: list[bytes] = []
    sent: list[bytes] = []
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        frames.append(encode(opcode if i == 0 else CONT, piece, fin=last))
        if not last and i < len(pings):
            frames.append(encode(PING, pings[i]))
            sent.append(pings[i])
    return frames, sent


ping_payloads = st.binary(max_size=125)
cuts = st.lists(st.integers(0, 1 << 16), max_size=3)
counter = iter(range(1 << 30))


@st.composite
def message(draw: st.DrawFn) -> tuple[list[bytes], str, Any]:
    binary = draw(st.booleans())
    pings = draw(st.lists(ping_payloads, max_size=2))
    kind = draw(st.sampled_from(["call"] * 4 + ["junk", "bad-utf8", "huge", "interrupted"]))
    if kind in ("call", "junk"):
        ident = f"c{next(counter)}"
        if kind == "call":
            data = json.dumps(call("system_health", id_=ident)).encode()
        else:
            data = b"\x00" + draw(st.text(max_size=200)).encode()  # never JSON
        frames, sent = _fragments(BINARY if binary else TEXT, data, draw(cuts), pings)

        def answered(plan: Plan) -> None:
            plan.pongs += sent
            if kind == "call":
                plan.ids.add(ident)
            else:
                plan.junk += 1

        return frames, f"{kind} {'binary' if binary else 'text'} {len(frames)} frame(s)", answered
    if kind == "bad-utf8":
        bad = draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80"]))
        prefix = draw(st.text(max_size=50)).encode()
        end = draw(st.booleans())
        # a bad sequence inside, or one cut short at the end of the message
        data = prefix + (b"\xe2\x82" if end else bad + b"tail")
        return _fragments(TEXT, data, draw(cuts), [])[0], "invalid UTF-8 text", 1007
    if kind == "huge":
        data = b"a" * (LIMIT + draw(st.integers(1, 20_000)))
        frames, sent = _fragments(BINARY if binary else TEXT, data, draw(cuts), pings)

        def refused(plan: Plan) -> None:
            plan.pongs += sent
            plan.too_large += 1

        return frames, f"huge ({len(data)} bytes)", refused
    # a fragmented message interrupted by a new data frame instead of a continuation
    first = encode(TEXT, b'{"jsonrpc":', fin=False)
    return [first, encode(BINARY if binary else TEXT, b"x")], "interrupted message", 1002


violations = st.sampled_from(
    [
        ("reserved opcode 0x3", lambda: encode(0x3, b"x"), 1002),
        ("reserved opcode 0xB", lambda: encode(0xB, b""), 1002),
        ("RSV1 without an extension", lambda: encode(TEXT, b"{}", rsv=4), 1002),
        ("RSV3", lambda: encode(BINARY, b"{}", rsv=1), 1002),
        ("unmasked text", lambda: encode(TEXT, b"{}", masked=False), 1002),
        ("unmasked ping", lambda: encode(PING, b"p", masked=False), 1002),
        ("ping over 125 bytes", lambda: encode(PING, b"p" * 126), 1002),
        ("close over 125 bytes", lambda: encode(CLOSE, close_payload(1000, b"r" * 200)), 1002),
        ("fragmented ping", lambda: encode(PING, b"p", fin=False), 1002),
        ("continuation first", lambda: encode(CONT, b"x"), 1002),
        ("8-byte length for 5 bytes", lambda: encode(TEXT, b"hello", long_form=True), 1002),
        ("close with one byte", lambda: encode(CLOSE, b"\x03"), 1002),
        ("close code 999", lambda: encode(CLOSE, close_payload(999)), 1002),
        ("close code 1005", lambda: encode(CLOSE, close_payload(1005)), 1002),
        ("close code 2000", lambda: encode(CLOSE, close_payload(2000)), 1002),
        ("close code 5000", lambda: encode(CLOSE, close_payload(5000)), 1002),
        ("close reason not UTF-8", lambda: encode(CLOSE, close_payload(1000, b"\xff")), 1007),
    ]
)


@st.composite
def part(draw: st.DrawFn) -> tuple[list[bytes], str, Any]:
    kind = draw(st.sampled_from(["message"] * 5 + ["ping", "pong", "bad", "close"]))
    if kind == "message":
        return draw(message())
    if kind == "ping":
        payload = draw(ping_payloads)

        def pong(plan: Plan) -> None:
            plan.pongs.append(payload)

        return [encode(PING, payload)], "ping", pong
    if kind == "pong":
        return [encode(PONG, draw(ping_payloads))], "unsolicited pong", None
    if kind == "bad":
        what, make, code = draw(violations)
        return [make()], what, code
    code = draw(st.sampled_from([1000, 1001, 3000, 4321]))
    return [encode(CLOSE, close_payload(code, b"bye"))], f"close {code}", code


def _plan(parts: list[tuple[list[bytes], str, Any]]) -> Plan:
    plan = Plan()
    for frames, what, effect in parts:
        plan.add(frames, what, effect)
    return plan


plans = st.lists(part(), min_size=1, max_size=6).map(_plan)


def run_plan(port: int, plan: Plan) -> None:
    ws = RawWs(port)
    try:
        for data in plan.wire:
            if not ws.send(data):
                break
        ids, junk, pongs = set(plan.ids), plan.junk, list(plan.pongs)
        too_large = plan.too_large
        deadline = time.monotonic() + 15
        while True:
            if plan.close is None and not (ids or junk or too_large or pongs):
                break  # everything it was owed arrived
            got = ws.frame(deadline)
            assert got is not None, (
                f"{plan.what}: no close {plan.close}; still owed {ids}, {junk} + "
                f"{too_large} error(s), {len(pongs)} pong(s)"
            )
            op, payload = got
            if op == CLOSE:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None
                assert plan.close is not None, f"{plan.what}: closed ({code}) {payload!r}"
                assert code == plan.close, f"{plan.what}: close {code}, not {plan.close}"
                return  # answers still in flight may be lost with the socket
            if op == PONG:
                assert payload in pongs or plan.close is not None, (plan.what, payload)
                if payload in pongs:
                    pongs.remove(payload)
                continue
            assert op == TEXT, (plan.what, op)
            doc = json.loads(payload)
            if doc.get("id") is None and "too large" in doc["error"]["message"]:
                assert doc["error"]["code"] == -32600, doc
                assert doc["error"]["data"] == {"limit": LIMIT}, doc
                assert too_large > 0 or plan.close is not None, (plan.what, doc)
                too_large -= 1
            elif doc.get("id") is None:
                assert doc["error"]["code"] in (-32700, -32600), doc
                assert junk > 0 or plan.close is not None, (plan.what, doc)
                junk -= 1
            else:
                assert doc["id"] in ids and "result" in doc, (plan.what, doc)
                ids.discard(doc["id"])
        # nothing owed and still open: a normal call, then a clean close
        ws.send(encode(TEXT, json.dumps(call("system_health", id_="last")).encode()))
        got = ws.frame(time.monotonic() + 15)
        assert got is not None and got[0] == TEXT, (plan.what, got)
        assert json.loads(got[1])["id"] == "last"
        ws.send(encode(CLOSE, close_payload(1000)))
        got = ws.frame(time.monotonic() + 15)
        assert got is not None and got[0] == CLOSE, (plan.what, got)
        assert struct.unpack("!H", got[1][:2])[0] == 1000
    finally:
        ws.close()


def port_of(stack: Stack) -> int:
    return int(stack.proxy_url.rsplit(":", 1)[1])


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def assert_still_serving(stack: Stack) -> None:
    ws = RawWs(port_of(stack))
    try:
        ws.send(encode(TEXT, json.dumps(call("system_health", id_="alive")).encode()))
        got = ws.frame(time.monotonic() + 15)
        assert got is not None and json.loads(got[1])["id"] == "alive", got
    finally:
        ws.close()


def test_generated_frames_get_their_defined_outcome(wstack: Stack) -> None:
    port = port_of(wstack)
    seen = {"n": 0}

    @settings(
        max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(plan=plans)
    def run(plan: Plan) -> None:
        seen["n"] += 1
        run_plan(port, plan)

    run()
    assert seen["n"] >= EXAMPLES
    assert_still_serving(wstack)


# --- deterministic: huge messages, many fragments, ping floods ---------------------------------


def _answer(ws: RawWs) -> dict[str, Any]:
    got = ws.frame(time.monotonic() + 60)
    while got is not None and got[0] != TEXT:
        got = ws.frame(time.monotonic() + 60)
    assert got is not None, "no answer"
    return json.loads(got[1])


@pytest.mark.parametrize("fragmented", [False, True], ids=["one-frame", "fragmented"])
def test_a_64_mib_message_is_answered_413_without_being_kept(
    wstack: Stack, fragmented: bool
) -> None:
    assert wstack.proxy is not None
    pid = wstack.proxy.popen.pid
    rss_before = rss_kb(pid)
    total, piece = 64 * 1_048_576, b"a" * 65536
    ws = RawWs(port_of(wstack))
    try:
        if fragmented:
            count = total // len(piece)
            for i in range(count):
                ws.sock.sendall(encode(TEXT if i == 0 else CONT, piece, fin=i == count - 1))
        else:
            key = b"\x00\x00\x00\x00"  # a zero mask: the payload goes as it is
            ws.sock.sendall(bytes((0x80 | BINARY, 0x80 | 127)) + struct.pack("!Q", total) + key)
            for _ in range(total // len(piece)):
                ws.sock.sendall(piece)
        refused = _answer(ws)
        grown = rss_kb(pid) - rss_before
        # the socket is still open and serving
        ws.send(encode(TEXT, json.dumps(call("system_health", id_="next")).encode()))
        after = _answer(ws)
    finally:
        ws.close()
    assert refused["id"] is None and refused["error"]["code"] == -32600, refused
    assert refused["error"]["message"] == f"body too large: {total} bytes, the limit is {LIMIT}"
    assert after["id"] == "next" and "result" in after
    assert grown < 16 * 1024, f"mitmdump grew by {grown} kB for a {total >> 20} MiB message"


def test_a_message_in_5000_fragments_is_refused_and_the_socket_stays_open(wstack: Stack) -> None:
    ws = RawWs(port_of(wstack))
    try:
        frames = [encode(TEXT, b"", fin=False)] + [encode(CONT, b"", fin=False)] * 4998
        ws.send(b"".join(frames) + encode(CONT, b"[]"))
        refused = _answer(ws)
        ws.send(encode(TEXT, json.dumps(call("system_health", id_="next")).encode()))
        after = _answer(ws)
    finally:
        ws.close()
    assert refused["error"]["code"] == -32600 and "fragments" in refused["error"]["message"]
    assert after["id"] == "next" and "result" in after


def test_a_ping_flood_gets_every_pong_and_others_are_answered(wstack: Stack) -> None:
    flood = RawWs(port_of(wstack))
    try:
        payloads = [str(i).encode() for i in range(3000)]
        flood.send(b"".join(encode(PING, p) for p in payloads))
        assert_still_serving(wstack)  # another socket meanwhile
        flood.send(encode(TEXT, json.dumps(call("system_health", id_="flood")).encode()))
        pongs, answer = [], None
        deadline = time.monotonic() + 30
        while len(pongs) < len(payloads) or answer is None:
            got = flood.frame(deadline)
            assert got is not None, f"{len(pongs)} pongs, answer {answer}"
            if got[0] == PONG:
                pongs.append(got[1])
            else:
                answer = json.loads(got[1])
    finally:
        flood.close()
    assert pongs == payloads  # each ping answered, in order
    assert answer["id"] == "flood" and "result" in answer


def test_frames_split_across_reads_then_a_fragmented_message_are_all_answered(
    wstack: Stack,
) -> None:
    """The proxy reads plain-text sockets itself (addon/mitm/ws_reads.py): a
    frame arriving a few bytes at a time, several frames in one read, then a
    fragmented message (handed back to mitmproxy with every byte after it)
    and calls after that: each answered once, and a clean close."""
    ws = RawWs(port_of(wstack))
    ws.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        split = encode(TEXT, json.dumps(call("chain_getBlockHash", [1], id_="split")).encode())
        for i in range(0, len(split), 3):  # separate reads, most likely: a pause between
            assert ws.send(split[i : i + 3])
            time.sleep(0.002)
        assert _answer(ws)["id"] == "split"
        many = [call("chain_getBlockHash", [i], id_=f"m{i}") for i in range(20)]
        assert ws.send(b"".join(encode(TEXT, json.dumps(c).encode()) for c in many))
        seen = {_answer(ws)["id"] for _ in many}
        assert seen == {f"m{i}" for i in range(20)}
        body = json.dumps(call("system_health", id_="frag")).encode()
        after = encode(TEXT, json.dumps(call("system_health", id_="after")).encode())
        wire = encode(TEXT, body[:10], fin=False) + encode(0, body[10:]) + after
        assert ws.send(wire)
        assert {_answer(ws)["id"], _answer(ws)["id"]} == {"frag", "after"}
        assert ws.send(encode(CLOSE, close_payload(1000)))
        got = ws.frame(time.monotonic() + 15)
        assert got is not None and got[0] == CLOSE, got
        assert struct.unpack("!H", got[1][:2])[0] == 1000
    finally:
        ws.close()


def test_the_proxy_logged_no_error_and_serves_http(wstack: Stack) -> None:
    assert wstack.proxy is not None
    log = wstack.proxy.output()
    bad = [ln for ln in log.splitlines() if any(w in ln for w in ("Traceback", "crashed", "rror"))]
    assert bad == [], log[-3000:]


async def test_http_is_answered_after_all_of_it(wstack: Stack) -> None:
    r = await post(wstack.rpc_url(), call("system_health", id_="http"))
    assert r.status == 200 and r.body["id"] == "http"
