"""data-artifact and sse probes against tiny aiohttp servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from aiohttp import web

from sidecar.probing.probes import ProbeCall, probe, probe_artifact, probe_sse
from sidecar.probing.results import (
    ABORTED,
    BAD_RESPONSE,
    DEAD,
    LIVE,
    RATE_LIMITED,
    TIMEOUT,
    ProbeResult,
)
from tests.sidecar.probing.probes.helpers import (
    FIXED_NOW,
    StartServer,
    TinyServer,
    assert_no_secret,
    clock,
    free_port,
    make_endpoint,
    secret_url,
)

BIG = 256 * 1_048_576  # far larger than the probe reads, or socket buffers hold


class Counters:
    def __init__(self) -> None:
        self.big_bytes_sent = 0
        self.big_aborted = asyncio.Event()


async def file_small(request: web.Request) -> web.StreamResponse:
    return web.Response(body=b"x" * 1234, content_type="application/octet-stream")


async def file_chunked(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse()  # no Content-Length: chunked
    await resp.prepare(request)
    await resp.write(b"y" * 500)
    await resp.write_eof()
    return resp


def file_big(counters: Counters) -> web.StreamResponse:
    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Length": str(BIG)})
        await resp.prepare(request)
        chunk = b"z" * 65_536
        try:
            for _ in range(BIG // len(chunk)):
                await resp.write(chunk)
                counters.big_bytes_sent += len(chunk)
        except (ConnectionError, RuntimeError):
            counters.big_aborted.set()  # the probe hung up, as it should
        return resp

    return handler  # type: ignore[return-value]


async def file_cut(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Length": "100000"})
    await resp.prepare(request)
    await resp.write(b"partial")
    assert request.transport is not None
    request.transport.close()  # cut mid-body
    return resp


async def status_503(request: web.Request) -> web.StreamResponse:
    return web.Response(status=503, text="down")


async def status_429(request: web.Request) -> web.StreamResponse:
    return web.Response(status=429, text="slow down")


async def redirect(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/file")


async def hang(request: web.Request) -> web.StreamResponse:
    await asyncio.sleep(3600)
    raise AssertionError("unreachable")


async def sse_one_event(request: web.Request) -> web.StreamResponse:
    assert request.headers["Accept"] == "text/event-stream"
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(b": keep-alive\n\n")  # a comment block is not an event
    await asyncio.sleep(0.05)
    await resp.write(b'event: block\r\ndata: {"n": 1}')  # split across writes
    await asyncio.sleep(0.02)
    await resp.write(b"\r\n\r\n")
    await asyncio.sleep(3600)  # then stay open, like a real stream
    return resp


async def sse_silent(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(b": ping\n\n")
    await asyncio.sleep(3600)
    return resp


async def sse_ends(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(b"data: incomplete event, no blank line")
    await resp.write_eof()
    return resp


async def sse_wrong_type(request: web.Request) -> web.StreamResponse:
    return web.json_response({"data": 1})


@pytest.fixture
async def server(tiny_server: StartServer) -> tuple[TinyServer, Counters]:
    counters = Counters()
    routes = {
        "/file": file_small,
        "/chunked": file_chunked,
        "/big": file_big(counters),
        "/cut": file_cut,
        "/503": status_503,
        "/429": status_429,
        "/redirect": redirect,
        "/hang": hang,
        "/sse": sse_one_event,
        "/sse-silent": sse_silent,
        "/sse-ends": sse_ends,
        "/sse-json": sse_wrong_type,
    }
    return await tiny_server(routes), counters


async def run(
    srv: TinyServer, path: str, kind: str, session: aiohttp.ClientSession, timeout_s: float = 2.0
) -> ProbeResult:
    ep = make_endpoint(secret_url(srv.base, path), kind)
    result = await probe(ep, session, kind="full", timeout_s=timeout_s, clock=clock)
    assert result.endpoint_id == ep.id and result.at == FIXED_NOW
    assert result.best is None and result.archive is None
    assert_no_secret(result.detail)
    return result


# ---- data-artifact --------------------------------------------------------------------------


async def test_artifact_live_with_size(
    server: tuple[TinyServer, Counters], session: aiohttp.ClientSession
) -> None:
    srv, _ = server
    r = await run(srv, "/file", "data-artifact", session)
    assert (r.classification, r.detail) == (LIVE, "HTTP 200, 1234 bytes")
    assert isinstance(r.latency_ms, int)
    r = await run(srv, "/chunked", "data-artifact", session)
    assert (r.classification, r.detail) == (LIVE, "HTTP 200, 500 bytes")


async def test_artifact_big_file_is_not_downloaded(
    server: tuple[TinyServer, Counters], session: aiohttp.ClientSession
) -> None:
    srv, counters = server
    r = await run(srv, "/big", "data-artifact", session)
    assert (r.classification, r.detail) == (LIVE, f"HTTP 200, {BIG} bytes")
    await asyncio.wait_for(counters.big_aborted.wait(), 2)
    assert counters.big_bytes_sent < BIG // 4


async def test_artifact_read_limit(
    server: tuple[TinyServer, Counters], session: aiohttp.ClientSession
) -> None:
    srv, _ = server
    ep = make_endpoint(srv.url("/chunked"), "data-artifact")
    r = await probe_artifact(ProbeCall(ep, session, timeout_s=2, clock=clock), read_limit=100)
    assert (r.classification, r.detail) == (LIVE, "HTTP 200, over 100 bytes")


@pytest.mark.parametrize(
    ("path", "classification", "detail"),
    [
        ("/503", "http-503", "HTTP 503"),
        ("/429", RATE_LIMITED, "HTTP 429"),
        ("/nope", "http-404", "HTTP 404"),
        ("/redirect", LIVE, "HTTP 302 (redirect, not followed)"),
        ("/cut", ABORTED, "answer body cut off"),
    ],
)
async def test_artifact_classifications(
    path: str,
    classification: str,
    detail: str,
    server: tuple[TinyServer, Counters],
    session: aiohttp.ClientSession,
) -> None:
    srv, _ = server
    r = await run(srv, path, "data-artifact", session)
    assert (r.classification, r.detail) == (classification, detail)


async def test_artifact_timeout_and_dead(
    server: tuple[TinyServer, Counters], session: aiohttp.ClientSession
) -> None:
    srv, _ = server
    t0 = time.monotonic()
    r = await run(srv, "/hang", "data-artifact", session, timeout_s=0.3)
    assert time.monotonic() - t0 < 0.8
    assert r.classification == TIMEOUT
    ep = make_endpoint(secret_url(f"http://127.0.0.1:{free_port()}"), "data-artifact")
    r = await probe(ep, session, timeout_s=1, clock=clock)
    assert r.classification == DEAD
    assert_no_secret(r.detail)


# ---- sse ------------------------------------------------------------------------------------


async def test_sse_first_event(
    server: tuple[TinyServer, Counters], session: aiohttp.ClientSession
) -> None:
    srv, _ = server
    t0 = time.monotonic()
    r = await run(srv, "/sse", "sse", session)
    assert time.monotonic() - t0 < 1.0  # returns at the event, not at the timeout
    assert r.classification == LIVE
    assert r.detail.startswith("first event after")


async def test_sse_head_probe_is_the_full_probe(
    server: tuple[TinyServer, Counters], session: aiohttp.ClientSession
) -> None:
    srv, _ = server
    ep = make_endpoint(srv.url("/sse"), "sse")
    r = await probe(ep, session, kind="head", timeout_s=2, clock=clock)
    assert (r.classification, r.kind) == (LIVE, "head")


async def test_sse_no_event_in_time(
    server: tuple[TinyServer, Counters], session: aiohttp.ClientSession
) -> None:
    srv, _ = server
    t0 = time.monotonic()
    r = await run(srv, "/sse-silent", "sse", session, timeout_s=0.3)
    assert time.monotonic() - t0 < 0.8
    assert r.classification == TIMEOUT
    assert r.latency_ms is not None  # the headers did arrive


@pytest.mark.parametrize(
    ("path", "classification"),
    [
        ("/sse-json", BAD_RESPONSE),
        ("/sse-ends", BAD_RESPONSE),
        ("/503", "http-503"),
        ("/429", RATE_LIMITED),
    ],
)
async def test_sse_failures(
    path: str,
    classification: str,
    server: tuple[TinyServer, Counters],
    session: aiohttp.ClientSession,
) -> None:
    srv, _ = server
    r = await run(srv, path, "sse", session)
    assert r.classification == classification, r


async def test_sse_read_limit(
    server: tuple[TinyServer, Counters], session: aiohttp.ClientSession
) -> None:
    srv, _ = server
    ep = make_endpoint(srv.url("/sse-silent"), "sse")
    r = await probe_sse(ProbeCall(ep, session, timeout_s=2, clock=clock), read_limit=4)
    assert r.classification == BAD_RESPONSE
    assert "no event" in r.detail


async def test_unknown_kind_is_unknown(session: aiohttp.ClientSession) -> None:
    import dataclasses

    ep = dataclasses.replace(make_endpoint("http://127.0.0.1:1/", "sse"), kind="carrier-pigeon")
    r = await probe(ep, session, timeout_s=1, clock=clock)
    assert r.classification == "unknown"
