"""The scanner of large answers (``addon/rpc/splice.py``): what it accepts is
what a full parse reads, and the reply spliced from it is the reply parsed
and encoded again; anything unusual it refuses rather than guesses."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from addon.rpc.splice import plain_string, scan_answer
from common.jsontext import RawJson, dumps, loads, thaw
from tests.examples import examples

HEX = st.text(alphabet="0123456789abcdef", min_size=0, max_size=300).map(lambda h: "0x" + h)
# printable ASCII but the two characters JSON escapes (those strings are refused)
PRINTABLE = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E, exclude_characters='"\\'),
    max_size=200,
)
STRINGS = st.one_of(HEX, PRINTABLE)
# anything a node could answer: strings with escapes, non-ASCII, numbers, lists, objects
VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
KEY_ORDERS = [
    ("jsonrpc", "result", "id"),
    ("id", "jsonrpc", "result"),
    ("result", "id", "jsonrpc"),
    ("jsonrpc", "id", "result"),
]


def body_of(pairs: list[tuple[str, str]], trailing: str = "") -> bytes:
    """An answer written by hand: ``pairs`` of (key, JSON text), no whitespace."""
    return ("{" + ",".join(f'"{k}":{v}' for k, v in pairs) + "}" + trailing).encode()


def plain(result: str, order: tuple[str, ...] = KEY_ORDERS[0], trailing: str = "") -> bytes:
    texts = {"jsonrpc": '"2.0"', "result": json.dumps(result), "id": "0"}
    return body_of([(k, texts[k]) for k in order], trailing)


def spliced_reply(answer: dict[str, Any], client_id: Any) -> bytes:
    """What forward_pending and the reply make of an answer."""
    return dumps({**answer, "jsonrpc": "2.0", "id": client_id})


@settings(max_examples=examples(300))
@given(
    STRINGS,
    st.sampled_from(KEY_ORDERS),
    st.sampled_from(["", "\n", "\r\n", " \t\n"]),
    st.one_of(st.integers(-(2**63), 2**63), st.text(max_size=10), st.none()),
)
def test_plain_answers_are_taken_as_the_parse_reads_them(
    result: str, order: tuple[str, ...], trailing: str, client_id: Any
) -> None:
    body = plain(result, order, trailing)
    doc = scan_answer(body)
    assert doc is not None
    assert isinstance(doc["result"], RawJson)
    assert thaw(doc) == loads(body) == json.loads(body)
    assert doc["result"] == result  # RawJson equals the value it stands for
    # the reply with the client's id: the node's bytes verbatim, the same document
    parsed = loads(body)
    again = dumps({**parsed, "jsonrpc": "2.0", "id": client_id})
    reply = spliced_reply(doc, client_id)
    assert orjson.loads(reply) == orjson.loads(again)
    assert json.dumps(result).encode() in reply


@settings(max_examples=examples(300))
@given(VALUES, st.sampled_from(KEY_ORDERS))
def test_whatever_it_accepts_the_parse_reads_the_same(value: Any, order: tuple[str, ...]) -> None:
    texts = {"jsonrpc": '"2.0"', "result": json.dumps(value), "id": "0"}
    body = body_of([(k, texts[k]) for k in order])
    doc = scan_answer(body)
    if doc is None:
        return  # refused: parsed as before
    assert isinstance(value, str)
    assert thaw(doc) == json.loads(body)


@settings(max_examples=examples(200))
@given(st.binary(max_size=200))
def test_any_bytes_either_refused_or_read_as_the_parse_reads_them(junk: bytes) -> None:
    for body in (junk, b'{"jsonrpc":"2.0","result":"' + junk + b'","id":0}'):
        doc = scan_answer(body)
        if doc is not None:
            assert thaw(doc) == json.loads(body)


@pytest.mark.parametrize(
    "body",
    [
        # duplicate keys: which one a parser keeps is not the scanner's guess
        body_of([("jsonrpc", '"2.0"'), ("result", '"0x01"'), ("result", '"0x02"'), ("id", "0")]),
        body_of([("jsonrpc", '"2.0"'), ("result", '"0x01"'), ("id", "0"), ("id", "0")]),
        body_of([("jsonrpc", '"2.0"'), ("jsonrpc", '"2.0"'), ("result", '"0x01"'), ("id", "0")]),
        # whitespace anywhere but after the closing brace
        b' {"jsonrpc":"2.0","result":"0x01","id":0}',
        b'{ "jsonrpc":"2.0","result":"0x01","id":0}',
        b'{"jsonrpc": "2.0","result":"0x01","id":0}',
        b'{"jsonrpc":"2.0" ,"result":"0x01","id":0}',
        b'{"jsonrpc":"2.0","result" :"0x01","id":0}',
        b'{"jsonrpc":"2.0","result":"0x01","id":0 }',
        b'{"jsonrpc":"2.0",\n"result":"0x01","id":0}',
        # a nested "result", result not a string, error (with or without result)
        b'{"jsonrpc":"2.0","result":{"result":"0x01"},"id":0}',
        b'{"jsonrpc":"2.0","result":["0x01"],"id":0}',
        b'{"jsonrpc":"2.0","result":null,"id":0}',
        b'{"jsonrpc":"2.0","result":12,"id":0}',
        b'{"jsonrpc":"2.0","error":{"code":1,"message":"x"},"id":0}',
        b'{"jsonrpc":"2.0","error":{"code":1,"message":"x"},"result":"0x01","id":0}',
        b'{"jsonrpc":"2.0","result":"0x01","error":"x","id":0}',
        # a batch, other ids, other versions, missing keys, extra keys
        b'[{"jsonrpc":"2.0","result":"0x01","id":0}]',
        b'{"jsonrpc":"2.0","result":"0x01","id":1}',
        b'{"jsonrpc":"2.0","result":"0x01","id":00}',
        b'{"jsonrpc":"2.0","result":"0x01","id":0.0}',
        b'{"jsonrpc":"2.0","result":"0x01","id":-0}',
        b'{"jsonrpc":"2.0","result":"0x01","id":"0"}',
        b'{"jsonrpc":"2.0","result":"0x01","id":null}',
        b'{"jsonrpc":"1.0","result":"0x01","id":0}',
        b'{"jsonrpc":"2.0","result":"0x01"}',
        b'{"result":"0x01","id":0}',
        b'{"jsonrpc":"2.0","result":"0x01","id":0,"extra":1}',
        b'{"jsonrpc":"2.0","result":"0x01","id":0,}',
        # keys spelled with escapes, strings with escapes, control characters, non-ASCII
        b'{"jsonrpc":"2.0","res\\u0075lt":"0x01","id":0}',
        b'{"jsonrpc":"2.0","result":"0x\\u0030","id":0}',
        b'{"jsonrpc":"2.0","result":"a\\"b","id":0}',
        b'{"jsonrpc":"2.0","result":"a\tb","id":0}',
        b'{"jsonrpc":"2.0","result":"a\x00b","id":0}',
        '{"jsonrpc":"2.0","result":"é","id":0}'.encode(),
        b'{"jsonrpc":"2.0","result":"\xff","id":0}',
        # cut short, or bytes after the end
        b'{"jsonrpc":"2.0","result":"0x01","id":0',
        b'{"jsonrpc":"2.0","result":"0x01',
        b'{"jsonrpc":"2.0","result":"0x01","id":0}}',
        b'{"jsonrpc":"2.0","result":"0x01","id":0}x',
        b'{"jsonrpc":"2.0","result":"0x01","id":0}{"id":0}',
        b"",
        b"{}",
        b'"0x01"',
        "\ufeff".encode() + b'{"jsonrpc":"2.0","result":"0x01","id":0}',
    ],
)
def test_anything_unusual_is_refused(body: bytes) -> None:
    assert scan_answer(body) is None


def test_a_large_hex_answer_is_kept_verbatim() -> None:
    blob = "0x" + "ab" * 600_000
    body = plain(blob)
    doc = scan_answer(body)
    assert doc is not None
    assert doc["result"].text == json.dumps(blob).encode()
    reply = spliced_reply(doc, "my-id")
    assert reply == b'{"jsonrpc":"2.0","result":' + json.dumps(blob).encode() + b',"id":"my-id"}'


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        (b'"0x"', True),
        (b'""', True),
        (b'"', False),
        (b'"a"b"', False),
        (b'"a\\nb"', False),
        (b'"a\nb"', False),
        (b'"\x7f"', True),  # DEL: JSON leaves it unescaped
        ('"é"'.encode(), False),
    ],
)
def test_plain_strings(text: bytes, ok: bool) -> None:
    assert plain_string(text) is ok
    if ok:
        assert json.loads(text) == orjson.loads(text)


def test_a_cache_entry_is_not_searched_for_control_characters() -> None:
    assert not plain_string(b'"a\x01b"')
    assert plain_string(b'"a\x01b"', written_here=True)  # chainproxy escapes them when it writes
