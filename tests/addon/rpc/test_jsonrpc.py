"""JSON-RPC 2.0 request parsing: what is refused with which status and code, ids echoed exactly."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from addon.rpc.jsonrpc import (
    INVALID_REQUEST,
    PARSE_ERROR,
    BadItem,
    Call,
    Parsed,
    Refusal,
    dumps,
    error_obj,
    parse_body,
)
from tests.examples import examples

MAX = 100


def call(id_: Any = 1, method: str = "chain_getHeader", params: Any = None, **extra: Any) -> dict:
    obj: dict[str, Any] = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params is not None:
        obj["params"] = params
    obj.update(extra)
    return obj


def body(doc: Any) -> bytes:
    return json.dumps(doc).encode()


def parse(doc: Any, max_batch: int = MAX) -> Parsed | Refusal:
    return parse_body(body(doc), max_batch=max_batch)


# --- whole-body refusals --------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"   ",
        b"{",
        b'{"jsonrpc": "2.0", "id": 1, "method": "chain_getHeader"',
        b"<html>hello</html>",
        b"jsonrpc=2.0&method=chain_getHeader",
        b"{'jsonrpc': '2.0'}",
        b'{"jsonrpc":"2.0","id":1,"method":"m",}',
        b"[1,2",
    ],
)
def test_not_json_is_400_parse_error(raw: bytes) -> None:
    r = parse_body(raw, max_batch=MAX)
    assert isinstance(r, Refusal)
    assert (r.status, r.code, r.id) == (400, PARSE_ERROR, None)


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff\xfe\xfd",
        b'{"jsonrpc":"2.0","id":1,"method":"chain_get\xffHeader"}',
        b'{"jsonrpc":"2.0","id":"\xc3\x28","method":"m"}',
        b"\x80" * 64,
    ],
)
def test_non_utf8_bytes_are_400_parse_error(raw: bytes) -> None:
    r = parse_body(raw, max_batch=MAX)
    assert isinstance(r, Refusal)
    assert (r.status, r.code) == (400, PARSE_ERROR)


@pytest.mark.parametrize(
    "raw",
    [
        b"NaN",
        b'{"jsonrpc":"2.0","id":NaN,"method":"chain_getHeader"}',
        b'{"jsonrpc":"2.0","id":1,"method":"chain_getBlockHash","params":[Infinity]}',
    ],
)
def test_nan_and_infinity_literals_are_not_json(raw: bytes) -> None:
    r = parse_body(raw, max_batch=MAX)
    assert isinstance(r, Refusal)
    assert (r.status, r.code) == (400, PARSE_ERROR)


def test_huge_float_id_is_echoed_as_json_or_refused() -> None:
    # 1e400 overflows a double: either the body is refused as not JSON, or the id
    # is kept as a value whose answer is still JSON (never Infinity). Both branches
    # assert: a parser that returned anything else fails.
    r = parse_body(b'{"jsonrpc":"2.0","id":1e400,"method":"chain_getHeader"}', max_batch=MAX)
    if isinstance(r, Refusal):
        assert (r.status, r.code, r.id) == (400, PARSE_ERROR, None)
        return
    assert isinstance(r, Parsed) and not r.is_batch and len(r.items) == 1
    item = r.items[0]
    assert isinstance(item, Call)
    answer = dumps(error_obj(item.id, INVALID_REQUEST, "x"))
    assert json.loads(answer)["id"] == json.loads(json.dumps(item.id, allow_nan=False))


def test_empty_batch_is_400_invalid_request() -> None:
    r = parse_body(b"[]", max_batch=MAX)
    assert isinstance(r, Refusal)
    assert (r.status, r.code, r.id) == (400, INVALID_REQUEST, None)


@pytest.mark.parametrize(("limit", "size"), [(100, 101), (5, 6), (1, 2), (3, 500)])
def test_batch_over_limit_is_413_naming_the_limit(limit: int, size: int) -> None:
    r = parse([call(i) for i in range(size)], max_batch=limit)
    assert isinstance(r, Refusal)
    assert (r.status, r.code) == (413, INVALID_REQUEST)
    assert str(limit) in r.message


@pytest.mark.parametrize(("limit", "size"), [(100, 100), (5, 5), (1, 1)])
def test_batch_at_the_limit_is_accepted(limit: int, size: int) -> None:
    r = parse([call(i) for i in range(size)], max_batch=limit)
    assert isinstance(r, Parsed) and r.is_batch
    assert [c.id for c in r.calls] == list(range(size))


# --- single invalid objects ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("obj", "echo"),
    [
        ({"id": 7, "method": "chain_getHeader"}, 7),
        ({"jsonrpc": "1.0", "id": "abc", "method": "chain_getHeader"}, "abc"),
        ({"jsonrpc": 2.0, "id": 3, "method": "chain_getHeader"}, 3),
        ({"jsonrpc": "2.0", "id": 4}, 4),
        ({"jsonrpc": "2.0", "id": 5, "method": 42}, 5),
        ({"jsonrpc": "2.0", "id": 6, "method": ["chain_getHeader"]}, 6),
        ({"jsonrpc": "2.0", "id": 8, "method": ""}, 8),
        ({"jsonrpc": "2.0", "id": 9, "method": "chain_getHeader", "params": "0x1"}, 9),
        ({"jsonrpc": "2.0", "id": 10, "method": "chain_getHeader", "params": 5}, 10),
        ({"jsonrpc": "2.0", "id": {"a": 1}, "method": "chain_getHeader"}, None),
        ({"jsonrpc": "2.0", "id": [1], "method": "chain_getHeader"}, None),
        ({"jsonrpc": "2.0", "id": True, "method": "chain_getHeader"}, None),
        ({"jsonrpc": "2.0", "method": "chain_getHeader"}, None),
        ("chain_getHeader", None),
        (42, None),
        (None, None),
    ],
)
def test_single_invalid_object_is_400_invalid_request_with_id(obj: Any, echo: Any) -> None:
    r = parse(obj)
    assert isinstance(r, Refusal)
    assert (r.status, r.code) == (400, INVALID_REQUEST)
    assert r.id == echo and type(r.id) is type(echo)


def test_valid_single_call() -> None:
    r = parse(call(1, "chain_getBlockHash", [5]))
    assert r == Parsed((Call(1, "chain_getBlockHash", [5]),), is_batch=False)


@pytest.mark.parametrize(
    ("params", "expected"),
    [(None, []), ([], []), ({"hash": "0x1"}, {"hash": "0x1"}), ([1, [2, 3]], [1, [2, 3]])],
)
def test_params_forms(params: Any, expected: Any) -> None:
    obj = call(1)
    obj["params"] = params
    r = parse(obj)
    assert isinstance(r, Parsed)
    assert r.calls[0].params == expected


def test_missing_params_means_no_params() -> None:
    r = parse({"jsonrpc": "2.0", "id": 1, "method": "system_health"})
    assert isinstance(r, Parsed)
    assert r.calls[0].params == []


def test_single_item_batch_stays_a_batch() -> None:
    r = parse([call(1)])
    assert isinstance(r, Parsed) and r.is_batch


# --- batches with junk -------------------------------------------------------------------------


def test_batch_junk_items_become_per_item_errors_in_order() -> None:
    doc = [
        call(1, "chain_getHeader"),
        42,
        {"jsonrpc": "2.0", "method": "chain_getHeader"},  # notification
        call("two", "chain_getBlockHash", [1]),
        {"jsonrpc": "1.0", "id": "old", "method": "m"},
        [call(3)],  # nested batch
        call(4, 99),
        None,
        call(None, "system_health"),
    ]
    r = parse(doc)
    assert isinstance(r, Parsed) and r.is_batch
    assert len(r.items) == len(doc)
    kinds = [type(i).__name__ for i in r.items]
    assert kinds == [
        "Call",
        "BadItem",
        "BadItem",
        "Call",
        "BadItem",
        "BadItem",
        "BadItem",
        "BadItem",
        "Call",
    ]
    bad = [i for i in r.items if isinstance(i, BadItem)]
    assert all(b.code == INVALID_REQUEST for b in bad)
    assert [i.id for i in r.items] == [1, None, None, "two", "old", None, 4, None, None]
    assert [c.id for c in r.calls] == [1, "two", None]


def test_batch_of_only_junk_is_still_parsed_per_item() -> None:
    r = parse([1, 2, 3])
    assert isinstance(r, Parsed)
    assert len(r.items) == 3 and not r.calls


# --- ids are echoed exactly --------------------------------------------------------------------


IDS = [
    0,
    1,
    -1,
    2**53 + 1,
    2**64 + 7,
    -(2**70),
    1.5,
    -0.25,
    1.0,
    1e-7,
    "",
    "1",
    "abc",
    "0x01",
    "\u00fcn\u00efc\u00f8d\u00e9 \u2713 \U0001f680",
    "\u4e2d\u6587",
    None,
]


@pytest.mark.parametrize("id_", IDS, ids=repr)
def test_id_is_preserved_exactly(id_: Any) -> None:
    for doc in (call(id_), [call(id_), call("other")]):
        r = parse(doc)
        assert isinstance(r, Parsed)
        got = r.items[0].id
        assert got == id_ and type(got) is type(id_)
        # and it serialises back to the very same JSON text
        assert json.dumps(got) == json.dumps(id_)


def test_id_survives_non_ascii_raw_utf8() -> None:
    raw = '{"jsonrpc":"2.0","id":"caf\u00e9-\U0001f680","method":"system_health"}'.encode()
    r = parse_body(raw, max_batch=MAX)
    assert isinstance(r, Parsed)
    assert r.items[0].id == "caf\u00e9-\U0001f680"


def test_error_obj_carries_id_and_data() -> None:
    e = error_obj("x", -32601, "nope", {"policy": "allowlist"})
    assert e == {
        "jsonrpc": "2.0",
        "id": "x",
        "error": {"code": -32601, "message": "nope", "data": {"policy": "allowlist"}},
    }
    assert "data" not in error_obj(None, -32700, "bad")["error"]
    assert json.loads(dumps(e)) == e


# --- robustness ------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [10, 500])
def test_moderate_nesting_in_params_is_parsed(depth: int) -> None:
    params = json.loads("[" * depth + "]" * depth)
    r = parse(call(1, "state_call", params))
    assert isinstance(r, Parsed)


@pytest.mark.parametrize(
    "raw",
    [
        b"[" * 100_000,
        b"[" * 100_000 + b"]" * 100_000,
        b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
        b'{"jsonrpc":"2.0","id":1,"method":"m","params":' + b"[" * 20_000 + b"]" * 20_000 + b"}",
    ],
)
def test_absurd_nesting_does_not_crash(raw: bytes) -> None:
    r = parse_body(raw, max_batch=MAX)
    assert isinstance(r, Refusal | Parsed)
    if isinstance(r, Refusal):
        assert r.status in (400, 413)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5)
    ),
    max_leaves=30,
)

call_like = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2.0, None]) | json_values,
        "id": json_values,
        "method": st.sampled_from(["chain_getHeader", ""]) | json_values,
        "params": json_values,
    },
)


def _check_result(r: Any, max_batch: int) -> None:
    assert isinstance(r, Parsed | Refusal)
    if isinstance(r, Refusal):
        assert r.status in (400, 413)
        assert r.code in (PARSE_ERROR, INVALID_REQUEST)
        json.dumps(error_obj(r.id, r.code, r.message, r.data))  # the answer can be written
    else:
        assert r.items
        if not r.is_batch:
            assert len(r.items) == 1 and isinstance(r.items[0], Call)
        else:
            assert len(r.items) <= max_batch
        for item in r.items:
            assert isinstance(item, Call | BadItem)
            if isinstance(item, Call):
                assert isinstance(item.method, str) and item.method
                assert isinstance(item.params, list | dict)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=json_values | call_like | st.lists(call_like | json_values, max_size=6))
def test_property_parse_body_never_raises_on_json(doc: Any) -> None:
    _check_result(parse_body(json.dumps(doc).encode(), max_batch=4), 4)


@settings(max_examples=examples(300), deadline=None)
@given(raw=st.binary(max_size=200))
def test_property_parse_body_never_raises_on_bytes(raw: bytes) -> None:
    _check_result(parse_body(raw, max_batch=MAX), MAX)


@settings(max_examples=examples(200), deadline=None)
@given(prefix=st.binary(max_size=20), text=st.text(max_size=60))
def test_property_parse_body_never_raises_on_json_ish_text(prefix: bytes, text: str) -> None:
    raw = prefix + b'{"jsonrpc":"2.0","id":' + text.encode("utf-8", "surrogatepass")
    _check_result(parse_body(raw, max_batch=MAX), MAX)
