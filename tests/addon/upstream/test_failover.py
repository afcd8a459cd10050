"""Judging an upstream answer: ok (pass it on), soft (try another node, keep it if
nothing better comes) or hard (fail over): status codes, bodies, ids, batches,
nulls and the node errors that mean "ask an archive"."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addon.rpc.jsonrpc import Call
from addon.upstream.failover import CAPACITY, assess, node_limit
from tests.examples import examples

HASH = "0x" + "ab" * 32

HASH2 = "0x" + "cd" * 32

DISCARDED = "State already discarded for 0x" + "12" * 32


def c(method: str = "chain_getHeader", params: Any = None, id_: Any = "caller") -> Call:
    return Call(id_, method, [] if params is None else params)


def res(id_: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "result": result}


def err(id_: Any, code: int | None, message: str, data: Any = None) -> dict[str, Any]:
    e: dict[str, Any] = {"message": message}
    if code is not None:
        e["code"] = code
    if data is not None:
        e["data"] = data
    return {"jsonrpc": "2.0", "id": id_, "error": e}


def raw(doc: Any) -> bytes:
    return json.dumps(doc).encode()


HEADER = {"parentHash": HASH, "number": "0x10", "stateRoot": HASH, "extrinsicsRoot": HASH}


def test_valid_result_is_ok_with_the_answer() -> None:
    a = assess(200, raw(res(0, HEADER)), [c()], is_batch=False, tip=100)
    assert a.verdict == "ok"
    assert a.answers == (res(0, HEADER),)
    assert not a.prefer_archive


@pytest.mark.parametrize("status", [500, 502, 503, 504, 429])
@pytest.mark.parametrize(
    "body", [b"<html>Bad Gateway</html>", b"", raw(res(0, HEADER))], ids=["html", "empty", "valid"]
)
def test_5xx_and_429_are_hard(status: int, body: bytes) -> None:
    a = assess(status, body, [c()], is_batch=False)
    assert a.verdict == "hard"
    assert a.reason
    assert a.answers is None


@pytest.mark.parametrize(
    "body",
    [
        b"<html><body>502 Bad Gateway</body></html>",
        b"garbage",
        b"",
        b'{"jsonrpc":"2.0","id":0,"result":{"parentHash":"0x',
        b'[{"jsonrpc":"2.0","id":0,"result":1}',
        raw({"jsonrpc": "2.0", "id": 0}),  # neither result nor error
        raw({"jsonrpc": "2.0", "result": HEADER}),  # no id
        raw([res(0, HEADER)]),  # a batch answer to a single call
        raw("just a string"),
        raw(None),
        b"\xff\xfe",
    ],
)
def test_invalid_or_truncated_body_is_hard(body: bytes) -> None:
    a = assess(200, body, [c()], is_batch=False)
    assert (a.verdict, a.reason) == ("hard", "invalid-body")


@pytest.mark.parametrize("wrong", [1, "0", None, -1, "caller"])
def test_wrong_id_is_hard(wrong: Any) -> None:
    a = assess(200, raw(res(wrong, HEADER)), [c()], is_batch=False)
    assert a.verdict == "hard"


@pytest.mark.parametrize(
    "doc",
    [
        [res(0, 1)],  # too short
        [res(0, 1), res(1, 2), res(2, 3)],  # too long
        [res(0, 1), res(0, 2)],  # duplicate id
        [res(0, 1), res(5, 2)],  # id out of range
        [res(0, 1), res("1", 2)],  # string id
        [res(0, 1), res(True, 2)],  # bool id
        [res(0, 1), "x"],  # junk item
        res(0, 1),  # single answer to a batch
        [],
    ],
)
def test_batch_that_does_not_line_up_is_hard(doc: Any) -> None:
    a = assess(200, raw(doc), [c(), c()], is_batch=True)
    assert a.verdict == "hard"


@pytest.mark.parametrize(
    "error",
    [
        err(0, -32603, "Internal error"),
        err(0, -32603, "something broke"),
        err(0, -32000, "Internal error: database locked"),
    ],
)
def test_internal_error_is_hard(error: dict[str, Any]) -> None:
    a = assess(200, raw(error), [c("state_getStorage", ["0x00"])], is_batch=False)
    assert a.verdict == "hard"


def test_json_rpc_rate_limit_error_is_hard() -> None:
    a = assess(200, raw(err(0, -32029, "Too many requests")), [c()], is_batch=False)
    assert a.verdict == "hard"


@pytest.mark.parametrize(
    ("code", "message", "reason"),
    [
        (-32004, "RPC work limit exceeded", "work-limited"),  # what the issue measured
        (-32005, "Limit exceeded", "work-limited"),  # EIP-1474 gateways
        (-32009, "Server is busy, try again later", "work-limited"),  # jsonrpsee
        (-32604, "Server is busy, try again later", "work-limited"),  # older jsonrpsee
        (-32000, "daily request limit reached", "work-limited"),
        (-32029, "anything at all", "rate-limited"),  # public RPC providers
        (-32005, "rate limited", "rate-limited"),
        (-32000, "Too Many Requests", "rate-limited"),
        # a chainproxy upstream's quota refusal: that node's limit for this proxy
        (-32005, "rate limit exceeded: 100 requests per 60s", "rate-limited"),
    ],
)
def test_a_nodes_limit_in_a_json_rpc_error_is_its_capacity(
    code: int, message: str, reason: str
) -> None:
    assert node_limit(code, message) == reason
    a = assess(
        200, raw(err(0, code, message)), [c("state_getKeysPaged", ["0x", 10])], is_batch=False
    )
    assert (a.verdict, a.reason) == ("hard", reason) and reason in CAPACITY


@pytest.mark.parametrize(
    ("code", "message", "data"),
    [
        (-32004, "Method not supported", None),  # EIP-1474's -32004
        (-32005, "Batched requests are not supported by this server", None),  # jsonrpsee's
        (-32004, "subscription closed with error", None),
        # chainproxy's own policy refusals (an upstream chainproxy): answers, not limits
        (
            -32004,
            "too many subscriptions on this socket (limit 4)",
            {"policy": "max_subscriptions"},
        ),
        (-32004, "unknown API key", {"policy": "api_key"}),
        (-32601, "method not allowed: author_submitExtrinsic", {"policy": "allowlist"}),
        # a runtime's deterministic error that happens to say "limit exceeded"
        (-32000, "Client error: Execution failed: Other: weight limit exceeded", None),
    ],
)
def test_errors_that_are_not_a_nodes_limit_are_passed_on(
    code: int, message: str, data: Any
) -> None:
    assert node_limit(code, message) is None
    doc = err(0, code, message, data)
    a = assess(200, raw(doc), [c("state_getKeysPaged", ["0x", 10])], is_batch=False)
    assert a.verdict == "ok" and a.answers == (doc,)


def test_a_batch_with_items_refused_for_the_nodes_limits_keeps_its_answers() -> None:
    """Another node is tried; the answers are kept in case every node refuses."""
    doc = [res(0, "0x1"), err(1, -32004, "RPC work limit exceeded")]
    a = assess(200, raw(doc), [c(), c("state_getKeysPaged", ["0x", 10])], is_batch=True)
    assert (a.verdict, a.reason) == ("hard", "work-limited")
    assert a.answers == tuple(doc)
    # any other hard item: a failure of the node (the answers kept for an
    # upstream batch, whose items are judged apart: addon/upstream/batching.py)
    doc = [err(0, -32603, "Internal error"), err(1, -32004, "RPC work limit exceeded")]
    a = assess(200, raw(doc), [c(), c("state_getKeysPaged", ["0x", 10])], is_batch=True)
    assert (a.verdict, a.reason, a.answers) == ("hard", "upstream-internal", tuple(doc))
    # a single call's: nothing kept
    a = assess(200, raw(err(0, -32603, "Internal error")), [c()], is_batch=False)
    assert (a.verdict, a.reason, a.answers) == ("hard", "upstream-internal", None)


def test_state_discarded_is_soft_and_prefers_archive() -> None:
    call = c("state_getStorage", ["0x26aa", HASH])
    a = assess(200, raw(err(0, 4003, DISCARDED)), [call], is_batch=False, tip=5_000_000)
    assert a.verdict == "soft"
    assert a.prefer_archive
    assert a.answers == (err(0, 4003, DISCARDED),)  # kept: the answer if nothing does better


def test_state_discarded_without_code_or_with_internal_code_is_still_soft() -> None:
    call = c("state_call", ["Metadata_metadata", "0x", HASH])
    for doc in (err(0, None, DISCARDED), err(0, -32603, DISCARDED)):
        a = assess(200, raw(doc), [call], is_batch=False)
        assert a.verdict == "soft" and a.prefer_archive


@pytest.mark.parametrize(
    "error",
    [
        err(0, -32602, "Invalid params: invalid type: string, expected u32"),
        err(0, -32601, "Method not found"),
        err(0, None, "Method not found: chain_nope"),  # chopsticks: no code
        err(0, None, "Invalid params"),
        err(0, -32000, "Client error: Execution failed: Other: Exported method not found"),
        err(0, 1002, "Verification Error: Runtime error: Execution failed"),
    ],
)
def test_deterministic_upstream_errors_are_ok(error: dict[str, Any]) -> None:
    a = assess(200, raw(error), [c("chain_getBlockHash", ["x"])], is_batch=False, tip=100)
    assert a.verdict == "ok"
    assert a.answers == (error,)  # passed through unchanged


def test_error_with_http_400_but_valid_json_rpc_body_is_passed_through() -> None:
    error = err(0, -32602, "Invalid params")
    a = assess(400, raw(error), [c()], is_batch=False)
    assert a.verdict == "ok" and a.answers == (error,)


@pytest.mark.parametrize(
    ("params", "tip", "verdict"),
    [
        ([100], 200, "soft"),
        ([200], 200, "soft"),
        (["0x64"], 200, "soft"),
        (["100"], 200, "soft"),
        ([201], 200, "ok"),
        ([10**9], 200, "ok"),
        ([100], None, "ok"),
        ([], 200, "ok"),
        ([[1, 2, 300]], 200, "soft"),  # whole list answered null
    ],
)
def test_get_block_hash_null(params: list[Any], tip: int | None, verdict: str) -> None:
    call = c("chain_getBlockHash", params)
    a = assess(200, raw(res(0, None)), [call], is_batch=False, tip=tip)
    assert a.verdict == verdict
    assert a.answers == (res(0, None),)
    assert not a.prefer_archive


@pytest.mark.parametrize(
    ("result", "verdict"),
    [
        ([HASH, None, HASH2], "soft"),  # 0x2 <= tip unknown to this node
        ([HASH, HASH, HASH2], "ok"),
        ([HASH, HASH, None], "ok"),  # only the future block is null
    ],
)
def test_get_block_hash_list_form(result: list[Any], verdict: str) -> None:
    call = c("chain_getBlockHash", [[1, "0x2", 500]])
    a = assess(200, raw(res(0, result)), [call], is_batch=False, tip=200)
    assert a.verdict == verdict


@pytest.mark.parametrize("method", ["chain_getBlock", "chain_getHeader"])
def test_hash_pinned_null_is_soft(method: str) -> None:
    a = assess(200, raw(res(0, None)), [c(method, [HASH])], is_batch=False, tip=None)
    assert a.verdict == "soft"
    assert a.answers == (res(0, None),)


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("chain_getHeader", []),
        ("chain_getBlock", []),
        ("chain_getHeader", ["not-a-hash"]),
        ("state_getStorage", ["0x26aa"]),
        ("system_health", []),
    ],
)
def test_unpinned_null_is_ok(method: str, params: list[Any]) -> None:
    a = assess(200, raw(res(0, None)), [c(method, params)], is_batch=False, tip=100)
    assert a.verdict == "ok"


def batch_calls() -> list[Call]:
    return [c("chain_getHeader", [], 7), c("chain_getBlockHash", [5], "x"), c("system_health")]


def test_batch_all_ok() -> None:
    doc = [res(0, HEADER), res(1, HASH), res(2, {"peers": 3})]
    a = assess(200, raw(doc), batch_calls(), is_batch=True, tip=100)
    assert a.verdict == "ok"
    assert a.answers == tuple(doc)


def test_batch_answered_out_of_order_is_matched_by_id() -> None:
    doc = [res(2, {"peers": 3}), res(0, HEADER), res(1, HASH)]
    a = assess(200, raw(doc), batch_calls(), is_batch=True, tip=100)
    assert a.verdict == "ok"
    assert a.answers is not None
    assert [x["id"] for x in a.answers] == [0, 1, 2]
    assert a.answers[1]["result"] == HASH


def test_batch_with_one_hard_item_is_hard() -> None:
    doc = [res(0, HEADER), err(1, -32603, "Internal error"), res(2, {"peers": 3})]
    a = assess(200, raw(doc), batch_calls(), is_batch=True, tip=100)
    assert a.verdict == "hard"


def test_batch_with_one_soft_item_is_soft() -> None:
    doc = [res(0, HEADER), res(1, None), res(2, {"peers": 3})]
    a = assess(200, raw(doc), batch_calls(), is_batch=True, tip=100)
    assert a.verdict == "soft"
    assert a.answers == tuple(doc)


def test_batch_with_soft_and_hard_items_is_hard() -> None:
    doc = [res(0, None), err(1, -32603, "Internal error"), res(2, {})]
    calls = [c("chain_getHeader", [HASH]), c("state_getStorage", ["0x1"]), c("system_health")]
    assert assess(200, raw(doc), calls, is_batch=True).verdict == "hard"


def test_batch_state_discarded_item_prefers_archive() -> None:
    doc = [res(0, HEADER), err(1, 4003, DISCARDED)]
    calls = [c(), c("state_getStorage", ["0x26aa", HASH])]
    a = assess(200, raw(doc), calls, is_batch=True)
    assert a.verdict == "soft" and a.prefer_archive


def test_batch_deterministic_error_item_is_ok() -> None:
    doc = [res(0, HEADER), err(1, -32602, "Invalid params"), res(2, {})]
    a = assess(200, raw(doc), batch_calls(), is_batch=True, tip=100)
    assert a.verdict == "ok"
    assert a.answers is not None and a.answers[1]["error"]["code"] == -32602


@settings(max_examples=examples(200), deadline=None)
@given(
    status=st.sampled_from([200, 200, 200, 400, 404, 429, 500, 503]),
    body=st.binary(max_size=80)
    | st.builds(
        lambda d: json.dumps(d).encode(),
        st.recursive(
            st.none() | st.booleans() | st.integers(-2, 5) | st.text(max_size=20),
            lambda ch: st.lists(ch, max_size=4) | st.dictionaries(st.text(max_size=6), ch),
            max_leaves=12,
        ),
    ),
    n=st.integers(1, 3),
    is_batch=st.booleans(),
    tip=st.none() | st.integers(0, 100),
)
def test_property_assess_never_raises(
    status: int, body: bytes, n: int, is_batch: bool, tip: int | None
) -> None:
    calls = [c("chain_getBlockHash", [i * 40]) for i in range(n if is_batch else 1)]
    a = assess(status, body, calls, is_batch=is_batch, tip=tip)
    assert a.verdict in ("ok", "soft", "hard")
    if a.verdict == "hard":
        assert a.reason
    else:
        assert a.answers is not None and len(a.answers) == len(calls)


@pytest.mark.parametrize(
    "message",
    [
        "Client error: UnknownBlock: Header was not found in the database: " + HASH,
        "UnknownBlock: " + HASH,
    ],
)
def test_unknown_block_error_is_soft_without_archive_preference(message: str) -> None:
    call = c("state_getStorage", ["0x26aa", HASH])
    a = assess(200, raw(err(0, 4001, message)), [call], is_batch=False, tip=100)
    assert a.verdict == "soft"
    assert not a.prefer_archive


def test_single_answer_with_id_false_is_not_our_id_zero() -> None:
    body = b'{"jsonrpc":"2.0","id":false,"result":"0x1"}'
    a = assess(200, body, [Call(1, "chain_getBlockHash", [1])], is_batch=False)
    assert (a.verdict, a.reason) == ("hard", "invalid-body")
