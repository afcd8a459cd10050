"""Pure parts of the probes: classification, secret scrubbing, the SSE event
detector, and the node checks over a fake transport."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import aiohttp
import pytest
from aiohttp.client_reqrep import ConnectionKey
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.probing.probes import (
    Observation,
    ProbeCall,
    ProbeFailure,
    SseEventDetector,
    classify_exception,
    classify_rpc_error,
    classify_status,
    node_checks,
    run_probe,
    safe_detail,
)
from sidecar.probing.probes.classify import describe_exception, url_secrets
from sidecar.probing.probes.jsonrpc_client import RpcCall, RpcReply
from sidecar.probing.results import (
    ABORTED,
    BAD_RESPONSE,
    DEAD,
    LIVE,
    RATE_LIMITED,
    SYNCING,
    TIMEOUT,
    UNKNOWN,
    WRONG_CHAIN,
)
from tests.examples import examples
from tests.sidecar.probing.probes.helpers import clock, make_endpoint

KEY = ConnectionKey("h", 443, True, True, None, None, None)


# ---- classification -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "expected"),
    [(200, LIVE), (204, LIVE), (302, LIVE), (400, "http-400"), (404, "http-404"),
     (429, RATE_LIMITED), (500, "http-500"), (503, "http-503")],
)  # fmt: skip
def test_classify_status(status: int, expected: str) -> None:
    assert classify_status(status) == expected


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        ({"code": -32029, "message": "Too many requests"}, RATE_LIMITED),
        ({"message": "Rate limit exceeded"}, RATE_LIMITED),
        ({"code": -32000, "message": "rate_limit reached"}, RATE_LIMITED),
        ({"code": -32000, "message": "request throttled"}, RATE_LIMITED),
        ({"code": 429}, RATE_LIMITED),
        ({"code": -32601, "message": "Method not found"}, BAD_RESPONSE),
        ({"message": "boom"}, BAD_RESPONSE),
        ("not an object", BAD_RESPONSE),
        (None, BAD_RESPONSE),
    ],
)
def test_classify_rpc_error(error: Any, expected: str) -> None:
    assert classify_rpc_error(error) == expected


def _request_info() -> aiohttp.RequestInfo:
    from multidict import CIMultiDict, CIMultiDictProxy
    from yarl import URL

    url = URL("https://u:SECRET123@h/?apikey=SECRET123")
    return aiohttp.RequestInfo(url, "GET", CIMultiDictProxy(CIMultiDict()), url)


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (TimeoutError(), TIMEOUT),
        (aiohttp.ServerTimeoutError("x"), TIMEOUT),
        (aiohttp.ConnectionTimeoutError("x"), TIMEOUT),
        (aiohttp.ClientConnectorError(KEY, ConnectionRefusedError(111, "refused")), DEAD),
        (aiohttp.ClientConnectorDNSError(KEY, OSError(-2, "Name or service not known")), DEAD),
        (aiohttp.ClientOSError(104, "reset"), DEAD),
        (ConnectionResetError(), DEAD),
        (ConnectionRefusedError(), DEAD),
        (aiohttp.ServerDisconnectedError(), ABORTED),
        (aiohttp.ClientPayloadError("cut"), ABORTED),
        (aiohttp.ClientConnectionError("Connection closed"), ABORTED),
        (aiohttp.ClientResponseError(_request_info(), (), status=503), "http-503"),
        (aiohttp.ClientResponseError(_request_info(), (), status=429), RATE_LIMITED),
        (aiohttp.WSServerHandshakeError(_request_info(), (), status=200), BAD_RESPONSE),
        (aiohttp.WSServerHandshakeError(_request_info(), (), status=502), "http-502"),
        (aiohttp.InvalidURL("https://u:SECRET123@h"), BAD_RESPONSE),
        (ValueError("bad json"), BAD_RESPONSE),
        (ProbeFailure(WRONG_CHAIN, "x"), WRONG_CHAIN),
        (KeyError("bug"), UNKNOWN),
    ],
)
def test_classify_exception(exc: BaseException, expected: str) -> None:
    assert classify_exception(exc) == expected
    text = describe_exception(exc)
    assert text and "SECRET123" not in text


def test_describe_connector_errors() -> None:
    refused = aiohttp.ClientConnectorError(KEY, ConnectionRefusedError(111, "x"))
    assert describe_exception(refused) == "connection refused"
    dns = aiohttp.ClientConnectorDNSError(KEY, OSError(-2, "x"))
    assert describe_exception(dns) == "DNS lookup failed"


# ---- secrets --------------------------------------------------------------------------------


def test_url_secrets_and_scrub() -> None:
    url = (
        "https://bob:p%40ssw0rd@rpc.example.com/v1/0123456789abcdef0123/x"
        "?apikey=SECRET123&format=json&n=1"
    )
    secrets = url_secrets(url)
    for s in ("bob", "p%40ssw0rd", "p@ssw0rd", "SECRET123", "0123456789abcdef0123"):
        assert s in secrets
    # what redact_url shows is not secret, so it is not scrubbed
    assert "json" not in secrets and "v1" not in secrets
    text = safe_detail(
        "key SECRET123 user bob pw p@ssw0rd path 0123456789abcdef0123 application/json", url
    )
    assert text == "key *** user *** pw *** path *** application/json"


def test_safe_detail_is_one_bounded_line() -> None:
    text = safe_detail("a\nb\x00c" + "x" * 500, "http://h/")
    assert "\n" not in text and "\x00" not in text
    assert len(text) <= 200


# ---- SSE detector ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stream", "complete"),
    [
        (b"data: x\n\n", True),
        (b"data: x\r\n\r\n", True),
        (b"data: x\r\r", True),
        (b"data\n\n", True),  # a bare field name is a data field with an empty value
        (b"\xef\xbb\xbfdata: x\n\n", True),
        (b"event: a\nid: 1\ndata: x\nretry: 5\n\n", True),
        (b": comment\n\n", False),
        (b"event: a\n\n", False),  # no data: not dispatched
        (b"data: x\n", False),  # not yet terminated
        (b"datax: 1\n\n", False),
        (b": c\n\nevent: e\n\ndata: y\n\n", True),
    ],
)
def test_sse_detector(stream: bytes, complete: bool) -> None:
    d = SseEventDetector()
    assert d.feed(stream) is complete


def _whole(stream: bytes) -> bool:
    return SseEventDetector().feed(stream)


_sse_piece = st.sampled_from(
    [
        b"data: 1",
        b"data",
        b": c",
        b"event: e",
        b"id: 7",
        b"\n",
        b"\r",
        b"\r\n",
        b"x",
        b"\xef\xbb\xbf",
    ]
)


@settings(max_examples=examples(300), deadline=None)
@given(pieces=st.lists(_sse_piece, max_size=12), cuts=st.lists(st.integers(0, 200), max_size=6))
def test_sse_detector_chunking_does_not_matter(pieces: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(pieces)
    d = SseEventDetector()
    got = False
    last = 0
    for cut in [*sorted({min(c, len(stream)) for c in cuts}), len(stream)]:
        got = d.feed(stream[last:cut]) or got
        last = cut
    assert got == _whole(stream)


# ---- node checks over a fake transport (no sockets) -----------------------------------------


class ScriptedRpc:
    """Answers each call from a table: method -> reply member(s)."""

    def __init__(self, table: dict[str, dict[str, Any]]) -> None:
        self.table = table

    async def batch(self, calls: Sequence[RpcCall]) -> tuple[list[RpcReply], int]:
        out = []
        for c in calls:
            entry = self.table.get(c.method, {"error": {"message": "Method not found"}})
            out.append(RpcReply(c.method, entry.get("result"), entry.get("error")))
        return out, 7


GENESIS = "0x" + "11" * 32


def good_table(**overrides: Any) -> dict[str, dict[str, Any]]:
    table: dict[str, dict[str, Any]] = {
        "system_health": {"result": {"isSyncing": False}},
        "chain_getHeader": {"result": {"number": "0x64"}},
        "chain_getFinalizedHead": {"result": "0x" + "22" * 32},
        "chain_getBlockHash": {"result": GENESIS},
        "state_getStorage": {"result": None},
    }
    table.update(overrides)
    return table


async def check(table: dict[str, dict[str, Any]], genesis: str | None = GENESIS) -> Any:
    async def body(obs: Observation) -> None:
        await node_checks(ScriptedRpc(table), obs, kind="full", genesis=genesis)

    ep = make_endpoint("http://127.0.0.1:1/?apikey=SECRET123", "node-rpc")
    async with aiohttp.ClientSession() as session:  # the scripted node takes no connection
        return await run_probe(ProbeCall(ep, session, timeout_s=1, clock=clock), body)


async def test_node_checks_verdicts() -> None:
    r = await check(good_table())
    assert (r.classification, r.best, r.finalized, r.archive, r.latency_ms) == (
        LIVE, 100, 100, True, 7,
    )  # fmt: skip
    r = await check(good_table(), genesis="0x" + "33" * 32)
    assert r.classification == WRONG_CHAIN
    r = await check(good_table(system_health={"result": {"isSyncing": True}}))
    assert r.classification == SYNCING
    # wrong chain wins over syncing: it is the graver fault
    r = await check(
        good_table(system_health={"result": {"isSyncing": True}}), genesis="0x" + "33" * 32
    )
    assert r.classification == WRONG_CHAIN


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8)
    | st.sampled_from(["0x10", "0x" + "ab" * 32, "State already discarded", "Too many requests"]),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(
        st.sampled_from(["number", "isSyncing", "message", "code", "x"]), kids, max_size=3
    ),
    max_leaves=8,
)  # fmt: skip
_member = st.one_of(
    st.builds(lambda v: {"result": v}, _json),
    st.builds(lambda v: {"error": v}, _json.filter(lambda v: v is not None)),
)
_methods = st.sampled_from(
    ["system_health", "chain_getHeader", "chain_getFinalizedHead", "chain_getBlockHash",
     "state_getStorage"]
)  # fmt: skip


@settings(max_examples=examples(300), deadline=None)
@given(overrides=st.dictionaries(_methods, _member, max_size=5))
def test_node_checks_never_raise(overrides: dict[str, dict[str, Any]]) -> None:
    r = asyncio.run(check(good_table(**overrides)))
    assert r.classification in {LIVE, BAD_RESPONSE, RATE_LIMITED, SYNCING, WRONG_CHAIN}
    assert "SECRET123" not in r.detail
