"""The upstream HTTP clients against real servers on 127.0.0.1: aiohttp web
servers for well-formed answers, raw asyncio servers for the odd ones. Tests
taking ``make_transport`` run with both clients (the lean one must behave as
aiohttp's did); the others are about the lean client's own pool."""

from __future__ import annotations

import asyncio
import base64
import datetime
import gzip
import ipaddress
import socket
import ssl
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from addon.runtime import Runtime
from addon.upstream.forward import AiohttpTransport, TransportError, new_session
from addon.upstream.lean import client as http_client
from addon.upstream.lean.client import LeanTransport
from common.config import ConfigError, parse_config
from tests.addon.upstream.conftest import MakeTransport

OK = b'{"jsonrpc":"2.0","id":0,"result":"0x1"}'
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head, await reader.readexactly(length)


def _answer(body: bytes = OK, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


class Raw:
    """A raw HTTP/1.1 server: ``handler(reader, writer, n)`` per connection
    (``n``: its index); counts connections and notes each one's end."""

    def __init__(self, handler: Callable[..., Awaitable[None]]) -> None:
        self.handler = handler
        self.connections = 0
        self.ended = asyncio.Event()  # a connection ended (the client closed it)
        self.tasks: set[asyncio.Task[Any]] = set()

    async def __aenter__(self) -> str:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            task = asyncio.current_task()
            assert task is not None
            self.tasks.add(task)
            try:
                await self.handler(reader, writer, self.connections - 1)
            except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
                pass  # the client closed, or the test ended
            finally:
                self.ended.set()
                writer.close()

        self.server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=self.tls())
        port = self.server.sockets[0].getsockname()[1]
        return f"{'https' if self.tls() else 'http'}://127.0.0.1:{port}/"

    def tls(self) -> ssl.SSLContext | None:
        return None

    async def __aexit__(self, *_: object) -> None:
        self.server.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks)


async def _keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
    while True:
        await _read_request(reader)
        writer.write(_answer())
        await writer.drain()


async def _web(aiohttp_server: Any, handler: Any) -> str:
    app = web.Application()
    app.router.add_post("/{tail:.*}", handler)
    server = await aiohttp_server(app)
    return str(server.make_url("/"))


# --- both clients -----------------------------------------------------------


async def test_sequential_calls_share_one_connection(make_transport: MakeTransport) -> None:
    raw = Raw(_keep_alive)
    async with raw as url:
        t = make_transport()
        for _ in range(5):
            assert await t.post(url, b"{}", 5) == (200, OK)
        await make_transport.aclose()
    assert raw.connections == 1


async def test_chunked_body(aiohttp_server: Any, make_transport: MakeTransport) -> None:
    async def chunked(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for part in (b'{"jsonrpc":"2.0",', b'"id":0,', b'"result":"0x1"}'):
            await resp.write(part)
        await resp.write_eof()
        return resp

    url = await _web(aiohttp_server, chunked)
    t = make_transport()
    for _ in range(2):  # the connection is reusable after a chunked answer
        assert await t.post(url, b"{}", 5) == (200, OK)


async def test_body_read_until_the_node_closes(make_transport: MakeTransport) -> None:
    async def until_close(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int
    ) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + OK)
        await writer.drain()

    async with Raw(until_close) as url:
        t = make_transport()
        for _ in range(2):  # and the next call goes on a new connection
            assert await t.post(url, b"{}", 5) == (200, OK)


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "raw-deflate"])
async def test_compressed_bodies_are_decoded(
    aiohttp_server: Any, make_transport: MakeTransport, encoding: str
) -> None:
    asked: list[str] = []

    async def packed(request: web.Request) -> web.Response:
        asked.append(request.headers.get("Accept-Encoding", ""))
        if encoding == "gzip":
            body = gzip.compress(OK)
        elif encoding == "deflate":
            body = zlib.compress(OK)
        else:  # what some servers send as "deflate": no zlib header
            c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
            body = c.compress(OK) + c.flush()
        name = "gzip" if encoding == "gzip" else "deflate"
        return web.Response(body=body, headers={"Content-Encoding": name})

    url = await _web(aiohttp_server, packed)
    assert await make_transport().post(url, b"{}", 5) == (200, OK)
    assert "gzip" in asked[0] and "deflate" in asked[0]


async def test_a_body_cut_short_is_truncated(make_transport: MakeTransport) -> None:
    async def short(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + OK)
        await writer.drain()

    async with Raw(short) as url:
        with pytest.raises(TransportError) as e:
            await make_transport().post(url, b"{}", 5)
    assert e.value.reason == "truncated-body"


async def test_too_large_by_content_length_fails_before_the_body(
    make_transport: MakeTransport,
) -> None:
    async def huge(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10000000\r\n\r\n")
        await writer.drain()
        await reader.read()  # never sends the body: the client must not wait for it

    async with Raw(huge) as url:
        with pytest.raises(TransportError) as e:
            await make_transport(1_000_000).post(url, b"{}", 30)
    assert e.value.reason == "response-too-large"


async def test_a_gzip_that_inflates_past_the_limit_is_too_large() -> None:
    async def bomb(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await _read_request(reader)
        body = gzip.compress(b" " * 2_000_000)
        writer.write(_answer(body, b"Content-Encoding: gzip\r\n"))
        await writer.drain()

    t = LeanTransport(max_response_bytes=1_000_000)
    async with Raw(bomb) as url:
        with pytest.raises(TransportError) as e:
            await t.post(url, b"{}", 5)
        t.close()
    assert e.value.reason == "response-too-large"


async def test_too_many_requests(make_transport: MakeTransport) -> None:
    answers = [
        b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 3\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy",
    ]

    async def limited(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        while answers:
            await _read_request(reader)
            writer.write(answers.pop(0))
            await writer.drain()

    async with Raw(limited) as url:
        t = make_transport()
        with pytest.raises(TransportError) as e:
            await t.post(url, b"{}", 5)
        assert (e.value.reason, e.value.retry_after) == ("rate-limited", 7.0)
        with pytest.raises(TransportError) as e:
            await t.post(url, b"{}", 5)
        assert (e.value.reason, e.value.retry_after) == ("rate-limited", None)
        with pytest.raises(TransportError) as e:
            await t.post(url, b"{}", 5)
        assert (e.value.reason, e.value.retry_after) == ("http-503", 3.0)
        # a 503 without Retry-After is an answer: failover judges it (assess)
        assert await t.post(url, b"{}", 5) == (503, b"busy")
        await make_transport.aclose()


async def test_the_request_path_query_headers_and_basic_auth(
    aiohttp_server: Any, make_transport: MakeTransport
) -> None:
    seen: list[web.Request] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(request)
        assert await request.read() == b'{"id":0}'
        return web.Response(body=OK)

    url = await _web(aiohttp_server, record)
    url = url.replace("http://", "http://us%40er:p%3Ass@") + "v1/key?net=finney"
    assert await make_transport().post(url, b'{"id":0}', 5) == (200, OK)
    r = seen[0]
    assert r.path_qs == "/v1/key?net=finney"
    assert r.headers["Authorization"] == "Basic " + base64.b64encode(b"us@er:p:ss").decode()
    assert r.headers["Content-Type"] == "application/json"
    assert r.headers["Accept"] == "application/json"
    assert r.headers["Host"] == url.split("@")[1].split("/")[0]


async def test_redirects_are_not_followed(
    aiohttp_server: Any, make_transport: MakeTransport
) -> None:
    async def moved(_: web.Request) -> web.Response:
        return web.Response(status=302, headers={"Location": "http://127.0.0.1:9/"}, body=b"")

    url = await _web(aiohttp_server, moved)
    assert await make_transport().post(url, b"{}", 5) == (302, b"")


async def test_a_slow_node_is_a_timeout(make_transport: MakeTransport) -> None:
    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await _read_request(reader)
        await reader.read()  # until the client gives up

    async with Raw(silent) as url:
        with pytest.raises(TransportError) as e:
            await make_transport().post(url, b"{}", 0.2)
        await make_transport.aclose()
    assert e.value.reason == "timeout"


async def test_refused_is_a_connect_error(make_transport: MakeTransport) -> None:
    # a port bound and not listening: refused, and no other socket can take it meanwhile
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        # by name too: resolved, then connected through happy eyeballs
        for host in ("127.0.0.1", "localhost"):
            with pytest.raises(TransportError) as e:
                await make_transport().post(f"http://{host}:{port}/", b"{}", 5)
            assert e.value.reason == "connect-error"


async def test_an_answer_that_is_not_http(make_transport: MakeTransport) -> None:
    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await _read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        await writer.drain()
        await reader.read()

    async with Raw(garbage) as url:
        with pytest.raises(TransportError) as e:
            await make_transport().post(url, b"{}", 5)
        await make_transport.aclose()
    assert e.value.reason == "client-error:ClientResponseError"


# --- the lean client's pool ---------------------------------------------------


async def test_an_answer_head_that_never_ends_is_cut_at_the_limit() -> None:
    """A hostile or broken node sends one header without end: llhttp keeps
    the value growing (100s of MiB across calls); the attempt fails at 64 KiB
    of head, at once, not at its timeout."""

    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nX-Junk: ")
        for _ in range(40):  # 40 x 8 KiB, never a line end
            writer.write(b"a" * 8192)
            await writer.drain()
            await asyncio.sleep(0.005)
        await reader.read()

    t = LeanTransport(max_response_bytes=1_000_000)
    async with Raw(endless) as url:
        with pytest.raises(TransportError) as e:
            await t.post(url, b"{}", 30)
        t.close()
    assert e.value.reason == "response-head-too-large"


async def test_an_idle_connection_the_node_closed_is_not_used_again() -> None:
    """The node closes each connection once idle (its keep-alive timer): the
    next call still succeeds, on a new connection."""

    async def once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await _read_request(reader)
        writer.write(_answer())
        await writer.drain()
        # and closes: the client may reuse it before or after seeing the FIN

    t = LeanTransport(max_response_bytes=1_000_000)
    raw = Raw(once)
    async with raw as url:
        for _ in range(3):
            assert await t.post(url, b"{}", 5) == (200, OK)
        t.close()
    assert raw.connections == 3


async def test_idle_connections_are_closed_after_the_keepalive() -> None:
    raw = Raw(_keep_alive)
    t = LeanTransport(max_response_bytes=1_000_000, keepalive_s=0.05)
    async with raw as url:
        assert await t.post(url, b"{}", 5) == (200, OK)
        await asyncio.wait_for(raw.ended.wait(), 5)  # the sweep closed it
        assert t.idle_connections() == 0
        assert await t.post(url, b"{}", 5) == (200, OK)
        t.close()
    assert raw.connections == 2


async def test_an_old_idle_connection_is_not_reused() -> None:
    now = [0.0]
    raw = Raw(_keep_alive)
    t = LeanTransport(max_response_bytes=1_000_000, clock=lambda: now[0])
    async with raw as url:
        assert await t.post(url, b"{}", 5) == (200, OK)
        now[0] += http_client.KEEPALIVE_S
        assert await t.post(url, b"{}", 5) == (200, OK)
        t.close()
    assert raw.connections == 2


async def test_a_fresh_connection_cut_is_not_retried() -> None:
    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await _read_request(reader)
        writer.transport.abort()

    t = LeanTransport(max_response_bytes=1_000_000)
    raw = Raw(cut)
    async with raw as url:
        with pytest.raises(TransportError) as e:
            await t.post(url, b"{}", 5)
    assert e.value.reason == "disconnected" and raw.connections == 1


async def test_a_cancelled_call_closes_its_connection() -> None:
    """The hedge's loser, cancelled half-way through its answer: its connection
    is closed, never pooled with the rest of that answer still to come."""
    started = asyncio.Event()

    async def halting(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        if n > 0:
            return await _keep_alive(reader, writer, n)
        await _read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + OK[:10])
        await writer.drain()
        started.set()
        await reader.read()  # EOF: the client closed it

    raw = Raw(halting)
    t = LeanTransport(max_response_bytes=1_000_000)
    async with raw as url:
        task = asyncio.create_task(t.post(url, b"{}", 30))
        await started.wait()
        await asyncio.sleep(0.05)  # the partial answer reaches the client
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(raw.ended.wait(), 5)
        assert t.idle_connections() == 0
        assert await t.post(url, b"{}", 5) == (200, OK)
        t.close()
    assert raw.connections == 2


async def test_callers_beyond_the_per_host_limit_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http_client, "LIMIT_PER_HOST", 2)
    release = asyncio.Event()
    waiting: list[int] = []
    two = asyncio.Event()

    async def gated(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while True:
            await _read_request(reader)
            waiting.append(n)
            if len(waiting) == 2:
                two.set()
            await release.wait()
            writer.write(_answer())
            await writer.drain()

    raw = Raw(gated)
    t = LeanTransport(max_response_bytes=1_000_000)
    async with raw as url:
        calls = [asyncio.create_task(t.post(url, b"{}", 30)) for _ in range(5)]
        await two.wait()
        await asyncio.sleep(0.05)  # the other three had their chance to connect
        assert raw.connections == 2
        release.set()
        assert await asyncio.gather(*calls) == [(200, OK)] * 5
        t.close()
    assert raw.connections == 2  # the waiting calls took the freed connections


async def test_close_closes_idle_connections_and_later_calls_are_not_pooled() -> None:
    """A flow that began before a reload may still fail over through a client
    the new runtime closed: it works, and leaves no connection open."""
    raw = Raw(_keep_alive)
    t = LeanTransport(max_response_bytes=1_000_000)
    async with raw as url:
        await t.post(url, b"{}", 5)
        t.close()
        await asyncio.wait_for(raw.ended.wait(), 5)
        raw.ended.clear()
        assert await t.post(url, b"{}", 5) == (200, OK)
        assert t.idle_connections() == 0
        await asyncio.wait_for(raw.ended.wait(), 5)
    assert raw.connections == 2


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


async def test_https_with_the_node_certificate_checked(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)

    class Tls(Raw):
        def tls(self) -> ssl.SSLContext:
            return server_ctx

    raw = Tls(_keep_alive)
    trusting = LeanTransport(
        max_response_bytes=1_000_000, ssl_context=ssl.create_default_context(cafile=str(cert))
    )
    default = LeanTransport(max_response_bytes=1_000_000)  # the system's CAs: not this one
    async with raw as url:
        assert url.startswith("https://")
        for _ in range(2):
            assert await trusting.post(url, b"{}", 5) == (200, OK)
        with pytest.raises(TransportError) as e:
            await default.post(url, b"{}", 5)
        trusting.close()
        default.close()
    assert e.value.reason == "connect-error"
    # the trusted calls shared one connection; the refused handshake never
    # reached the handler
    assert raw.connections == 1


# --- the runtime's wiring (proxy.upstream_client) -------------------------------


async def test_the_runtime_builds_the_configured_client_and_hands_it_on() -> None:
    async with new_session() as session:
        lean = Runtime.build(parse_config({}))
        lean.attach_session(session)
        assert isinstance(lean.transport, LeanTransport) and lean.lean is lean.transport
        # a reload keeps the pool (its connections are warm) and takes the new limit
        again = Runtime.build(parse_config({"proxy": {"max_response_bytes": 4096}}))
        again.inherit(lean)
        assert again.transport is lean.transport and again.lean is not None
        assert again.lean.max_response_bytes == 4096
        # the way back: aiohttp's client, the lean one closed
        kept = again.lean
        old = Runtime.build(parse_config({"proxy": {"upstream_client": "aiohttp"}}))
        old.inherit(again)
        assert isinstance(old.transport, AiohttpTransport) and old.lean is None
        assert kept.closed
        # and detaching (the addon unloaded) closes the lean client's connections
        back = Runtime.build(parse_config({}))
        back.inherit(old)
        assert isinstance(back.transport, LeanTransport)
        closing = back.lean
        assert back.detach_session() is session and back.transport is None
        assert closing is not None and back.lean is None
        assert closing.closed
    with pytest.raises(ConfigError, match=r"proxy\.upstream_client"):
        parse_config({"proxy": {"upstream_client": "httpx"}})


async def test_a_fault_in_the_client_fails_the_attempt_not_the_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As asyncio's happy eyeballs did in Python 3.12.1 (an AssertionError when a
    killed node refused): failover sees a failed node, the client no 500."""

    async def broken(*_: Any, **__: Any) -> Any:
        raise AssertionError

    monkeypatch.setattr(http_client.aiohappyeyeballs, "start_connection", broken)
    t = LeanTransport(max_response_bytes=1000)
    with pytest.raises(TransportError) as e:
        await t.post("http://127.0.0.1:9/", b"{}", 5)
    assert e.value.reason == "client-error:AssertionError"
