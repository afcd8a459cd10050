"""Node probes against a scriptable fake JSON-RPC server (HTTP and WebSocket), for
answers the simulated node never gives: syncing, RPC-level rate limits, errors
without a code, echoed secrets, odd batch answers."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from common.config import FINNEY_GENESIS, Endpoint
from sidecar.probing.probes import probe
from sidecar.probing.probes.node import SYSTEM_NUMBER_KEY
from sidecar.probing.results import BAD_RESPONSE, LIVE, RATE_LIMITED, SYNCING, TIMEOUT, ProbeResult
from tests.sidecar.probing.probes.helpers import (
    StartServer,
    TinyServer,
    assert_no_secret,
    clock,
    make_endpoint,
    secret_url,
)

FIN_HASH = "0x" + "ab" * 32
BLOCK1_HASH = "0x" + "01" * 32

# method -> answer member(s) ({"result": ...} or {"error": ...}), or a callable of
# the params giving one
Answer = dict[str, Any] | Callable[[Any], dict[str, Any]]


def default_answers() -> dict[str, Answer]:
    def block_hash(params: Any) -> dict[str, Any]:
        return {"result": FINNEY_GENESIS if params == [0] else BLOCK1_HASH}

    def header(params: Any) -> dict[str, Any]:
        number = "0x1386" if params == [FIN_HASH] else "0x1388"
        return {"result": {"number": number, "parentHash": "0x" + "00" * 32}}

    return {
        "system_health": {"result": {"peers": 3, "isSyncing": False, "shouldHavePeers": True}},
        "chain_getHeader": header,
        "chain_getFinalizedHead": {"result": FIN_HASH},
        "chain_getBlockHash": block_hash,
        "state_getStorage": {"result": "0x10270000"},
    }


class FakeRpc:
    """JSON-RPC over POST (batches) and WebSocket (one message per call)."""

    def __init__(self) -> None:
        self.answers = default_answers()
        self.seen: list[str] = []
        self.hang_methods: set[str] = set()
        self.raw_http: bytes | None = None  # answer every POST with this body instead
        self.ws_noise = False  # interleave notifications and foreign ids on WS

    def reply(self, req: dict[str, Any]) -> dict[str, Any]:
        method = req["method"]
        self.seen.append(method)
        ans = self.answers.get(method, {"error": {"code": -32601, "message": "Method not found"}})
        body = ans(req.get("params")) if callable(ans) else ans
        return {"jsonrpc": "2.0", "id": req["id"], **body}

    async def _maybe_hang(self, methods: list[str]) -> None:
        if self.hang_methods & set(methods):
            await asyncio.sleep(3600)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.method == "GET":
            return await self._ws(request)
        doc = await request.json()
        if self.raw_http is not None:
            return web.Response(body=self.raw_http, content_type="application/json")
        reqs = doc if isinstance(doc, list) else [doc]
        await self._maybe_hang([r["method"] for r in reqs])
        out = [self.reply(r) for r in reqs]
        return web.json_response(out if isinstance(doc, list) else out[0])

    async def _ws(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for msg in ws:
            req = json.loads(msg.data)
            await self._maybe_hang([req["method"]])
            if self.ws_noise:
                note = {"jsonrpc": "2.0", "method": "chain_newHead", "params": {"result": 1}}
                await ws.send_json(note)
                await ws.send_json({"jsonrpc": "2.0", "id": 9999, "result": "not yours"})
            await ws.send_json(self.reply(req))
        return ws


@pytest.fixture
async def fake(tiny_server: StartServer) -> tuple[FakeRpc, TinyServer]:
    rpc = FakeRpc()
    server = await tiny_server({"/{tail:.*}": rpc.handle})
    return rpc, server


def endpoints(server: TinyServer) -> list[Endpoint]:
    url = secret_url(server.base, "/rpc")
    return [
        make_endpoint(url, "node-rpc"),
        make_endpoint("ws" + url.removeprefix("http"), "node-wss"),
    ]


async def run_both(
    server: TinyServer, session: aiohttp.ClientSession, **kw: Any
) -> list[ProbeResult]:
    out = []
    for ep in endpoints(server):
        args: dict[str, Any] = {"timeout_s": 2.0, "clock": clock, "genesis": FINNEY_GENESIS} | kw
        result = await probe(ep, session, **args)
        assert_no_secret(result.detail)
        out.append(result)
    return out


async def test_fake_baseline(
    fake: tuple[FakeRpc, TinyServer], session: aiohttp.ClientSession
) -> None:
    rpc, server = fake
    storage_params: list[Any] = []

    def storage(params: Any) -> dict[str, Any]:
        storage_params.append(params)
        return {"result": "0x10270000"}

    rpc.answers["state_getStorage"] = storage
    for r in await run_both(server, session):
        assert (r.classification, r.best, r.finalized, r.archive) == (LIVE, 5000, 4998, True)
    # the archive check reads System.Number at block 1
    assert storage_params == [[SYSTEM_NUMBER_KEY, BLOCK1_HASH]] * 2


async def test_syncing(fake: tuple[FakeRpc, TinyServer], session: aiohttp.ClientSession) -> None:
    rpc, server = fake
    rpc.answers["system_health"] = {"result": {"peers": 1, "isSyncing": True}}
    for r in await run_both(server, session):
        assert r.classification == SYNCING
        assert r.best == 5000


async def test_health_unavailable_is_not_fatal(
    fake: tuple[FakeRpc, TinyServer], session: aiohttp.ClientSession
) -> None:
    rpc, server = fake
    del rpc.answers["system_health"]
    for r in await run_both(server, session):
        assert r.classification == LIVE
        assert "system_health unavailable" in r.detail


@pytest.mark.parametrize(
    "error",
    [
        {"code": -32029, "message": "Too Many Requests"},
        {"message": "rate limit exceeded, slow down"},  # no code, as some gateways send
        {"code": 429, "message": "quota"},
    ],
)
async def test_rpc_rate_limit_error(
    error: dict[str, Any], fake: tuple[FakeRpc, TinyServer], session: aiohttp.ClientSession
) -> None:
    rpc, server = fake
    rpc.answers["chain_getHeader"] = {"error": error}
    for r in await run_both(server, session):
        assert r.classification == RATE_LIMITED


async def test_error_without_code_is_bad_response(
    fake: tuple[FakeRpc, TinyServer], session: aiohttp.ClientSession
) -> None:
    rpc, server = fake
    rpc.answers["chain_getFinalizedHead"] = {"error": {"message": "boom"}}
    for r in await run_both(server, session):
        assert r.classification == BAD_RESPONSE
        assert r.detail == "chain_getFinalizedHead: error: boom"
        assert r.best == 5000  # what was learned before the failure is kept


async def test_echoed_secret_is_scrubbed(
    fake: tuple[FakeRpc, TinyServer], session: aiohttp.ClientSession
) -> None:
    rpc, server = fake
    message = "invalid api key SECRET123 for user alice-user:hunter2pw"
    rpc.answers["chain_getHeader"] = {"error": {"code": -32000, "message": message}}
    for r in await run_both(server, session):
        assert r.classification == BAD_RESPONSE
        assert "***" in r.detail
        assert_no_secret(r.detail)


@pytest.mark.parametrize(
    ("storage", "archive"),
    [
        ({"result": None}, True),  # key absent at block 1, but the state is there
        ({"error": {"code": 4003, "message": "Client error: State already discarded"}}, False),
        ({"error": {"code": 4003, "message": "UnknownBlock: Header was not found"}}, None),
    ],
)
async def test_archive_verdicts(
    storage: dict[str, Any],
    archive: bool | None,
    fake: tuple[FakeRpc, TinyServer],
    session: aiohttp.ClientSession,
) -> None:
    rpc, server = fake
    rpc.answers["state_getStorage"] = storage
    for r in await run_both(server, session):
        assert r.classification == LIVE
        assert r.archive is archive


async def test_block_one_unknown_means_not_archive(
    fake: tuple[FakeRpc, TinyServer], session: aiohttp.ClientSession
) -> None:
    rpc, server = fake
    rpc.answers["chain_getBlockHash"] = lambda p: {"result": FINNEY_GENESIS if p == [0] else None}
    for r in await run_both(server, session):
        assert (r.classification, r.archive) == (LIVE, False)
    assert "state_getStorage" not in rpc.seen


async def test_unknown_finalized_header_is_tolerated(
    fake: tuple[FakeRpc, TinyServer], session: aiohttp.ClientSession
) -> None:
    rpc, server = fake
    rpc.answers["chain_getHeader"] = lambda p: {"result": None if p else {"number": "0x10"}}
    for r in await run_both(server, session, kind="head"):
        assert (r.classification, r.best, r.finalized) == (LIVE, 16, None)


@pytest.mark.parametrize(
    "answer",
    [
        {"error": {"code": -32601, "message": "Method not found"}},
        {"result": None},
        {"result": {"specName": "x"}},
        {"result": {"specName": "", "specVersion": 1}},
        {"result": {"specName": "x", "specVersion": True}},
        {"result": {"specName": "x", "specVersion": -1}},
        {"result": {"specName": "x", "specVersion": "301"}},
    ],
)
async def test_a_node_that_does_not_tell_its_runtime_is_live(
    answer: Answer, fake: tuple[FakeRpc, TinyServer], session: aiohttp.ClientSession
) -> None:
    rpc, server = fake
    rpc.answers["state_getRuntimeVersion"] = answer
    for r in await run_both(server, session, kind="head"):
        assert (r.classification, r.best, r.spec_name, r.spec_version) == (LIVE, 5000, None, None)


async def test_a_rate_limited_runtime_read_is_rate_limited(
    fake: tuple[FakeRpc, TinyServer], session: aiohttp.ClientSession
) -> None:
    rpc, server = fake
    rpc.answers["state_getRuntimeVersion"] = {
        "error": {"code": -32029, "message": "Too many requests"}
    }
    for r in await run_both(server, session, kind="head"):
        assert r.classification == RATE_LIMITED


@pytest.mark.parametrize(
    "header",
    [None, {"number": "12"}, {"number": "0xZZ"}, {"number": True}, [1, 2], "0x10"],
)
async def test_bad_best_header(
    header: Any, fake: tuple[FakeRpc, TinyServer], session: aiohttp.ClientSession
) -> None:
    rpc, server = fake
    rpc.answers["chain_getHeader"] = {"result": header}
    for r in await run_both(server, session, kind="head"):
        assert r.classification == BAD_RESPONSE


async def test_bad_genesis_answer(
    fake: tuple[FakeRpc, TinyServer], session: aiohttp.ClientSession
) -> None:
    rpc, server = fake
    rpc.answers["chain_getBlockHash"] = lambda p: {"result": "0x12" if p == [0] else BLOCK1_HASH}
    for r in await run_both(server, session):
        assert r.classification == BAD_RESPONSE
        assert "genesis" in r.detail


async def test_ws_skips_notifications_and_foreign_ids(
    fake: tuple[FakeRpc, TinyServer], session: aiohttp.ClientSession
) -> None:
    rpc, server = fake
    rpc.ws_noise = True
    ep = endpoints(server)[1]
    r = await probe(ep, session, timeout_s=2, clock=clock, genesis=FINNEY_GENESIS)
    assert (r.classification, r.best, r.finalized, r.archive) == (LIVE, 5000, 4998, True)


@pytest.mark.parametrize(
    ("body", "classification"),
    [
        (
            b'{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"batch not allowed"}}',
            BAD_RESPONSE,
        ),
        (b'{"jsonrpc":"2.0","id":null,"error":{"message":"Too many requests"}}', RATE_LIMITED),
        (b'[{"jsonrpc":"2.0","id":1,"result":{"number":"0x1"}}]', BAD_RESPONSE),  # one missing
        (b"[1, 2]", BAD_RESPONSE),
        (b'"hello"', BAD_RESPONSE),
        (b"[" * 100_000, BAD_RESPONSE),  # deep nesting must not escape as RecursionError
    ],
)
async def test_odd_http_batch_answers(
    body: bytes,
    classification: str,
    fake: tuple[FakeRpc, TinyServer],
    session: aiohttp.ClientSession,
) -> None:
    rpc, server = fake
    rpc.raw_http = body
    ep = endpoints(server)[0]
    r = await probe(ep, session, kind="head", timeout_s=2, clock=clock)
    assert r.classification == classification, r


async def test_oversized_answer_is_bad_response(
    fake: tuple[FakeRpc, TinyServer], session: aiohttp.ClientSession
) -> None:
    rpc, server = fake
    rpc.raw_http = b"[" + b" " * 2_000_000 + b"]"
    r = await probe(endpoints(server)[0], session, kind="head", timeout_s=2, clock=clock)
    assert r.classification == BAD_RESPONSE
    assert "larger than" in r.detail


async def test_timeout_on_second_request_keeps_first_results(
    fake: tuple[FakeRpc, TinyServer], session: aiohttp.ClientSession
) -> None:
    rpc, server = fake
    rpc.hang_methods = {"state_getStorage"}
    for ep in endpoints(server):
        t0 = time.monotonic()
        r = await probe(ep, session, timeout_s=0.3, clock=clock, genesis=FINNEY_GENESIS)
        assert time.monotonic() - t0 < 0.8
        assert r.classification == TIMEOUT
        assert r.best == 5000 and r.latency_ms is not None


async def test_redirect_is_not_followed_for_rpc(
    tiny_server: StartServer, session: aiohttp.ClientSession
) -> None:
    async def moved(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/elsewhere")

    server = await tiny_server({"/{tail:.*}": moved})
    r = await probe(endpoints(server)[0], session, timeout_s=2, clock=clock)
    assert r.classification == "http-302"


async def test_caller_cancellation_propagates(
    fake: tuple[FakeRpc, TinyServer], session: aiohttp.ClientSession
) -> None:
    rpc, server = fake
    rpc.hang_methods = {"chain_getHeader"}
    for ep in endpoints(server):
        task = asyncio.ensure_future(probe(ep, session, timeout_s=10, clock=clock))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
