"""The fast JSON gives exactly what the standard library gives: the same
values (with the same types: a 70-bit integer stays an exact int), the same
refusals, and text the standard library reads back to the same value."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.jsontext import dumps, dumps_text, loads

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()  # includes lone surrogates, which orjson refuses
)
values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=20,
)


def _same(a: object, b: object) -> bool:
    """Equal, with the same type at every level (1 == 1.0 is not enough)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        assert isinstance(b, list)
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@given(values)
def test_loads_agrees_with_the_standard_library(value: object) -> None:
    text = json.dumps(value)
    assert _same(loads(text.encode()), json.loads(text))
    assert _same(loads(text), json.loads(text))


@given(values)
def test_what_dumps_writes_reads_back_the_same(value: object) -> None:
    assert _same(json.loads(dumps(value)), value)
    assert _same(json.loads(dumps_text(value)), value)


def test_a_big_integer_stays_exact_beside_a_float() -> None:
    doc = loads(b'{"balance":1208925819614629174706176,"ratio":0.5}')
    assert doc == {"balance": 2**80, "ratio": 0.5}
    assert type(doc["balance"]) is int


def test_utf16_and_a_utf8_bom_are_read_as_before() -> None:
    assert loads('{"a":[1,"é"]}'.encode("utf-16")) == {"a": [1, "é"]}
    assert loads(b"\xef\xbb\xbf[1]") == [1]


@pytest.mark.parametrize(
    "body",
    [b"[NaN]", b"[Infinity]", b"[-Infinity]", b"1e400", b"[1,]", b"", b"\xff\xfe\xfd", "\ufeff1"],
)
def test_what_is_not_strict_json_is_refused(body: bytes | str) -> None:
    with pytest.raises(ValueError):
        loads(body)


def test_a_megabyte_blob_round_trips() -> None:
    blob = "0x" + "ab" * 1_048_576
    body = dumps({"jsonrpc": "2.0", "id": 0, "result": blob})
    assert loads(body)["result"] == blob
    assert len(body) == len(blob) + len('{"jsonrpc":"2.0","id":0,"result":""}')
