"""A large answer judged without parsing it (``assess`` over
``addon/rpc/splice.py``): the same verdict and the same answer as the full
parse, its result kept as the node's bytes; the reply, a cross-check's
comparison and chainproxy's own calls see the value it stands for."""

from __future__ import annotations

import json
from typing import Any

import pytest

from addon.rpc.jsonrpc import Call
from addon.rpc.splice import RAW_MIN_BYTES
from addon.upstream.failover import assess
from common.jsontext import RawJson, dumps, loads, thaw

BLOB = "0x" + "ab" * RAW_MIN_BYTES
PIN = "0x" + "11" * 32


def compact(doc: Any, **kw: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":"), **kw).encode()


def body(result: Any, *, id_: Any = 0) -> bytes:
    return compact({"jsonrpc": "2.0", "result": result, "id": id_})


def state_call() -> Call:
    return Call(7, "state_call", ["SubnetInfoRuntimeApi_get_all_metagraphs", "0x", PIN])


def test_a_large_string_answer_is_ok_and_kept_raw() -> None:
    a = assess(200, body(BLOB), [state_call()], is_batch=False)
    assert a.verdict == "ok" and a.answers is not None
    (answer,) = a.answers
    assert isinstance(answer["result"], RawJson)
    assert thaw(answer) == loads(body(BLOB))
    reply = dumps({**answer, "jsonrpc": "2.0", "id": 7})
    assert loads(reply) == {"jsonrpc": "2.0", "result": BLOB, "id": 7}


@pytest.mark.parametrize(
    "raw",
    [
        body(BLOB, id_=1),  # not what was sent: invalid
        body(["0x01"] * (RAW_MIN_BYTES // 5)),  # not a string: parsed
        compact({"jsonrpc": "2.0", "error": {"code": 1, "message": "x" * RAW_MIN_BYTES}, "id": 0}),
        json.dumps({"jsonrpc": "2.0", "result": BLOB, "id": 0}, indent=1).encode(),
        body(BLOB)[:-10],  # cut short
    ],
)
def test_what_the_scanner_refuses_is_judged_as_before(raw: bytes) -> None:
    a = assess(200, raw, [state_call()], is_batch=False)
    try:
        doc = json.loads(raw)
    except ValueError:
        assert a.verdict == "hard"
        return
    if doc.get("id") != 0:
        assert a.verdict == "hard"
        return
    assert a.answers is not None
    assert not isinstance(a.answers[0].get("result"), RawJson)
    assert a.answers[0] == doc


def test_headers_and_block_hashes_are_always_parsed() -> None:
    header = "0x" + "00" * RAW_MIN_BYTES  # odd, but judged as it always was
    a = assess(200, body(header), [Call(1, "chain_getHeader", [PIN])], is_batch=False)
    assert a.answers is not None and not isinstance(a.answers[0]["result"], RawJson)
    a = assess(200, body(header), [Call(1, "chain_getBlockHash", [5])], is_batch=False)
    assert a.answers is not None and not isinstance(a.answers[0]["result"], RawJson)


def test_a_raw_result_equals_the_value_and_other_raw_texts() -> None:
    raw = RawJson(json.dumps(BLOB).encode())
    assert raw == BLOB and BLOB == raw
    assert raw == RawJson(json.dumps(BLOB).encode())
    assert raw != RawJson(json.dumps(BLOB + "00").encode())
    assert raw != BLOB + "00"
    assert RawJson(b'"\\u0041"') == RawJson(b'"A"')  # not the same text, the same value


def test_the_stdlib_fallback_thaws_raw_values() -> None:
    # an id beyond 64 bits goes out through the standard library's encoder
    raw = RawJson(json.dumps(BLOB).encode())
    out = dumps({"jsonrpc": "2.0", "result": raw, "id": 2**70})
    assert json.loads(out) == {"jsonrpc": "2.0", "result": BLOB, "id": 2**70}
