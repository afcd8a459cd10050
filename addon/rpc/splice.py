"""A node's large answer taken without parsing it (pure).

A 1 MiB answer parsed on the one event loop, then encoded again for the
cache and for the client, holds every other call behind it. A node answers a
single call ``{"jsonrpc":"2.0","result":"0x…","id":0}`` (jsonrpsee's order;
other servers put ``id`` first): the large part is one JSON string, the rest
a few bytes. ``scan_answer`` reads the top-level keys with ``bytes.find``
(C speed), checks the string cheaply (no escape, ASCII, printable), and keeps
its text as ``RawJson``: the client's reply, the cache and a cross-check use
those bytes verbatim.

It refuses (None: the caller parses the whole document, as before) anything
else: whitespace other than after the closing brace, a key other than
``jsonrpc``/``result``/``id`` or one of them twice, ``error``, an ``id``
other than ``0``, a ``jsonrpc`` other than ``"2.0"``, a result that is not a
string, a string with an escape, a control character or a non-ASCII byte, a
batch. What it accepts, ``loads`` reads as the same document.
"""

from __future__ import annotations

from typing import Any

from common.jsontext import RawJson

# an answer at least this large is scanned; smaller ones are parsed (cheap)
RAW_MIN_BYTES = 64 * 1024
# An answer this large gives the event loop back between its stages (read,
# judged, stored and answered in separate loop turns), so small calls that
# arrive meanwhile wait for one stage of it, never its whole handling.
BREATHE_BYTES = RAW_MIN_BYTES
_KEYS = frozenset({b"jsonrpc", b"result", b"id"})
_TRAILING = b" \t\r\n"
_CONTROL = tuple(bytes([c]) for c in range(0x20))  # JSON wants them escaped in a string
_QUOTE, _COMMA, _CLOSE = ord('"'), ord(","), ord("}")


def plain_string(text: bytes, *, written_here: bool = False) -> bool:
    """``text`` is a JSON string whose bytes are its canonical form: quotes at
    both ends and none between, no backslash, ASCII, no control character.
    ``written_here``: chainproxy wrote it (a cache entry), so a control
    character would have been escaped: not looked for (a pass per byte value,
    the costliest check: ~0.6 ms a MiB)."""
    n = len(text)
    if n < 2 or text[0] != _QUOTE or text[-1] != _QUOTE:
        return False
    if text.find(b'"', 1) != n - 1 or text.find(b"\\") != -1 or not text.isascii():
        return False
    return written_here or not any(c in text for c in _CONTROL)


def scan_answer(body: bytes) -> dict[str, Any] | None:
    """The answer to a single call sent with id 0, its string result kept as
    ``RawJson``; None when the body is anything but the plain shape."""
    end = len(body)
    while end and body[end - 1] in _TRAILING:
        end -= 1
    if end < 2 or body[0] != ord("{") or body[end - 1] != _CLOSE:
        return None
    seen: set[bytes] = set()
    result: RawJson | None = None
    pos = 1
    while True:
        if body[pos : pos + 1] != b'"':
            return None
        key_end = body.find(b'"', pos + 1, end)
        if key_end < 0:
            return None
        key = body[pos + 1 : key_end]
        if key not in _KEYS or key in seen:
            return None
        seen.add(key)
        pos = key_end + 1
        if body[pos : pos + 1] != b":":
            return None
        pos += 1
        if key == b"jsonrpc":
            if body[pos : pos + 5] != b'"2.0"':
                return None
            pos += 5
        elif key == b"id":
            if body[pos : pos + 1] != b"0":
                return None
            pos += 1
        else:
            close = body.find(b'"', pos + 1, end) if body[pos : pos + 1] == b'"' else -1
            if close < 0:
                return None
            text = body[pos : close + 1]
            if not plain_string(text):
                return None
            result = RawJson(text)
            pos = close + 1
        if pos >= end:
            return None
        if body[pos] == _COMMA:
            pos += 1
            continue
        if pos == end - 1 and len(seen) == 3 and result is not None:  # the closing brace
            return {"jsonrpc": "2.0", "result": result, "id": 0}
        return None
