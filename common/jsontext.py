"""JSON for the hot path: orjson where it gives exactly what the standard
library gives, the standard library where it would not.

A 1 MiB answer (a runtime-API blob) costs ~3 ms to parse and ~6 ms to encode
with ``json``, several times per call (the node's answer, the cache, Redis, the
client's reply), all on the one event loop every light call waits on. orjson
does the same in ~0.6 and ~0.2 ms. Its answers differ from the standard
library's in a few corners, so those go to the standard library:

* an integer beyond 64 bits parses to a float in orjson (exact ``int`` in
  ``json``): any float in orjson's result sends the text to ``json``;
* UTF-16/32 bodies, lone surrogate escapes, integers beyond 64 bits on the way
  out: orjson refuses them, ``json`` handles them as before.

``loads`` is strict either way: no NaN/Infinity, no number that overflows to
infinity, so whatever is parsed can be written back as valid JSON.

``RawJson`` is a value kept as the JSON text it came in (a node's large
result, a large cache entry): ``dumps`` writes its text verbatim (orjson's
``Fragment``: a copy, no encoding), ``thaw`` parses it where a value is
needed. It compares equal to the value it stands for.
"""

from __future__ import annotations

import json
import math
from typing import Any

import orjson


class RawJson:
    """A JSON value as its text, spliced verbatim by ``dumps``. Whoever makes
    one vouches that ``text`` is one valid JSON value (``addon/rpc/splice.py``
    scans for it; the cache wrote it with ``dumps``)."""

    __slots__ = ("fragment", "text")

    def __init__(self, text: bytes) -> None:
        self.text = text
        self.fragment = orjson.Fragment(text)

    def __eq__(self, other: object) -> bool:
        if type(other) is RawJson:
            # the texts a scanner accepts are canonical (a string without
            # escapes): the same text is the same value; otherwise parse both
            return self.text == other.text or loads(self.text) == loads(other.text)
        return bool(loads(self.text) == other)

    __hash__ = None  # type: ignore[assignment]  # equal to a value: never a key

    def __len__(self) -> int:
        return len(self.text)

    def __repr__(self) -> str:
        return f"RawJson({self.text[:40]!r}…, {len(self.text)} bytes)"


def thaw(value: Any) -> Any:
    """``value``, with a ``RawJson`` (at the top, or inside lists and dicts)
    parsed into what it stands for."""
    kind = type(value)
    if kind is RawJson:
        return loads(value.text)
    if kind is dict:
        return {k: thaw(v) for k, v in value.items()}
    if kind is list:
        return [thaw(v) for v in value]
    return value


def _fragment(value: Any) -> Any:
    """orjson's ``default``: a ``RawJson`` goes out as its text."""
    if type(value) is RawJson:
        return value.fragment
    raise TypeError(type(value).__name__)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise ValueError(f"number out of range: {text[:32]}")
    return value


# Built once: ``json.loads``/``json.dumps`` with options build a new decoder or
# encoder on every call (a few µs each).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)
_ENCODER = json.JSONEncoder(separators=(",", ":"))


def has_float(doc: Any) -> bool:
    stack = [doc]
    while stack:
        x = stack.pop()
        kind = type(x)
        if kind is float:
            return True
        if kind is dict:
            stack.extend(x.values())
        elif kind is list:
            stack.extend(x)
    return False


def _stdlib_loads(body: bytes | str) -> Any:
    if isinstance(body, str):
        if body.startswith("\ufeff"):
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", body, 0)
    else:
        body = body.decode(json.detect_encoding(body), "surrogatepass")
    return _DECODER.decode(body)


def loads(body: bytes | str) -> Any:
    """Accepts what ``json.loads`` accepts (UTF-8/16/32 bytes, str), with the
    same values and the same errors (``ValueError``, ``RecursionError``)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _stdlib_loads(body)  # its verdict and its error message
    if type(doc) is str or not has_float(doc):
        return doc
    return _stdlib_loads(body)  # a float may be a big integer orjson rounded


def dumps(doc: Any) -> bytes:
    """Compact JSON (non-ASCII as UTF-8, which is valid JSON either way)."""
    try:
        return orjson.dumps(doc, default=_fragment)
    except TypeError:  # JSONEncodeError: big ints, lone surrogates, int keys
        return _ENCODER.encode(thaw(doc)).encode()


def dumps_text(doc: Any) -> str:
    if type(doc) is RawJson:  # a cache entry kept as the node wrote it
        return doc.text.decode()
    try:
        return orjson.dumps(doc, default=_fragment).decode()
    except TypeError:
        return _ENCODER.encode(thaw(doc))
