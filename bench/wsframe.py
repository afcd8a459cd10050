"""Just enough of RFC 6455 for the benchmarks' WebSocket ends (pure): the
handshake's accept key, a frame for a message, and a parser that turns the
bytes of a stream into messages. Used by the trivial upstream (server side)
and by ``bench/wsload.py`` (client side), so neither end costs more CPU per
message than the proxy it measures would tolerate: no library, no task, no
copy beyond one join per message.

Not a general implementation: no extensions (no compression), control frames
handed back as they come, fragments joined.
"""

from __future__ import annotations

import base64
import hashlib
import struct
from dataclasses import dataclass, field

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
TEXT, BINARY, CLOSE, PING, PONG, CONT = 0x1, 0x2, 0x8, 0x9, 0xA, 0x0
ZERO_MASK = b"\x00\x00\x00\x00"  # a valid mask (RFC 6455 5.3) that leaves the payload as is


def accept_key(key: str | bytes) -> str:
    """``Sec-WebSocket-Accept`` for a client's ``Sec-WebSocket-Key``."""
    raw = key.encode() if isinstance(key, str) else key
    return base64.b64encode(hashlib.sha1(raw.strip() + GUID).digest()).decode()


def frame(payload: bytes, opcode: int = TEXT, mask: bytes | None = None) -> bytes:
    """One final frame; ``mask`` (4 bytes) for a client's frames, None for a server's."""
    n = len(payload)
    bit = 0x80 if mask is not None else 0
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, bit | n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, bit | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, bit | 127, n)
    if mask is None:
        return head + payload
    return head + mask + (payload if mask == ZERO_MASK else unmask(payload, mask))


def unmask(payload: bytes, mask: bytes) -> bytes:
    """XOR with the repeated 4-byte mask (one big-integer XOR, not a loop per byte)."""
    n = len(payload)
    if not n or mask == ZERO_MASK:
        return payload
    key = (mask * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big")


@dataclass
class Parser:
    """Bytes in (``feed``), whole messages out as ``(opcode, payload)``;
    continuation frames are joined into their message, control frames come
    out on their own as they arrive."""

    buf: bytearray = field(default_factory=bytearray)
    _parts: list[bytes] = field(default_factory=list)
    _opcode: int = 0

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        self.buf += data
        out: list[tuple[int, bytes]] = []
        buf = self.buf
        pos = 0
        end = len(buf)
        while end - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1]
            n = b1 & 0x7F
            at = pos + 2
            if n == 126:
                if end - at < 2:
                    break
                n = int.from_bytes(buf[at : at + 2], "big")
                at += 2
            elif n == 127:
                if end - at < 8:
                    break
                n = int.from_bytes(buf[at : at + 8], "big")
                at += 8
            mask = None
            if b1 & 0x80:
                if end - at < 4:
                    break
                mask = bytes(buf[at : at + 4])
                at += 4
            if end - at < n:
                break
            payload = bytes(buf[at : at + n])
            if mask is not None:
                payload = unmask(payload, mask)
            pos = at + n
            opcode, fin = b0 & 0x0F, b0 & 0x80
            if opcode >= CLOSE:  # control frames are never fragmented
                out.append((opcode, payload))
            elif opcode == CONT:
                self._parts.append(payload)
                if fin:
                    out.append((self._opcode, b"".join(self._parts)))
                    self._parts = []
            elif fin:
                out.append((opcode, payload))
            else:
                self._opcode, self._parts = opcode, [payload]
        if pos:
            del buf[:pos]
        return out
