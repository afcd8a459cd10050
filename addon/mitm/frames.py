"""A client's WebSocket frames read by chainproxy itself (pure: bytes in,
messages out), for the direct reads of ``addon/mitm/ws_reads.py``.

Only what an RPC client sends on a healthy socket is read here: whole
(unfragmented) text and binary messages within the size limit, pings and
pongs. At the first frame of any other kind (a close, a fragment, a frame
over the limit, reserved bits or opcodes, an unmasked frame, a length in more
bytes than it needs, a text message that is not UTF-8) the reader stops for
good and hands back every byte from that frame's first one: mitmproxy's own
WebSocket layer, which has seen nothing since the reads were taken over and so
sits at a frame boundary, carries on from there with its own rules (the
closing handshake, 1002/1007 closes, the -32600 of an oversized message). That
exact hand-over point is why this is a frame header parser of its own and not
wsproto's ``FrameProtocol``, which consumes what it is fed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

TEXT, BINARY, CLOSE, PING, PONG = 0x1, 0x2, 0x8, 0x9, 0xA


def unmask(payload: bytes | bytearray, mask: bytes | bytearray) -> bytes:
    """XOR with the repeated 4-byte mask: one big-integer XOR, not a loop per
    byte (wsproto's ``XorMaskerSimple`` does the same)."""
    n = len(payload)
    if not n:
        return b""
    key = (bytes(mask) * (n // 4 + 1))[:n]
    return (int.from_bytes(payload, "little") ^ int.from_bytes(key, "little")).to_bytes(n, "little")


def pong_frame(payload: bytes) -> bytes:
    """A server's unmasked pong echoing a ping's payload (at most 125 bytes)."""
    return bytes((0x80 | PONG, len(payload))) + payload


def ping_frame(payload: bytes) -> bytes:
    """A server's unmasked ping (a payload of at most 125 bytes)."""
    return bytes((0x80 | PING, len(payload))) + payload


@dataclass(slots=True)
class FrameReader:
    """Bytes of a client's socket in (``feed``), ``(opcode, payload)`` out for
    whole text/binary messages and pings/pongs; ``handover`` holds the bytes
    for mitmproxy once a frame of another kind came (then ``stopped``)."""

    max_message: int  # payload bytes of one message; larger ones are mitmproxy's
    buf: bytearray = field(default_factory=bytearray)
    handover: bytes | None = None

    @property
    def stopped(self) -> bool:
        return self.handover is not None

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """The messages ``data`` completes, in order; bytes of a frame still
        arriving are kept for the next call."""
        if self.handover is not None:
            self.handover += data
            return []
        buf = self.buf
        if buf:
            buf += data
        else:
            buf = bytearray(data)
        out: list[tuple[int, bytes]] = []
        pos, end = 0, len(buf)
        while end - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1]
            opcode = b0 & 0x0F
            n = b1 & 0x7F
            at = pos + 2
            if b0 & 0xF0 != 0x80 or not b1 & 0x80 or opcode not in _OURS:
                break  # a fragment, reserved bits, an unmasked frame, a close, another opcode
            if n == 126:
                if end - at < 2:
                    self._keep(buf, pos)
                    return out
                n = int.from_bytes(buf[at : at + 2], "big")
                at += 2
                if n < 126:
                    break  # a longer length than needed: a violation (1002, mitmproxy's)
            elif n == 127:
                if end - at < 8:
                    self._keep(buf, pos)
                    return out
                n = int.from_bytes(buf[at : at + 8], "big")
                at += 8
                if n < 65536:
                    break
            if n > self.max_message or (opcode >= CLOSE and n > 125):
                break  # over the limit (mitmproxy answers it), or a malformed control frame
            if end - at < 4 + n:
                self._keep(buf, pos)
                return out
            payload = unmask(buf[at + 4 : at + 4 + n], buf[at : at + 4])
            if opcode == TEXT and not _utf8(payload):
                break  # mitmproxy closes it with 1007
            out.append((opcode, payload))
            pos = at + 4 + n
        else:
            self._keep(buf, pos)
            return out
        self.handover = bytes(buf[pos:])
        self.buf = bytearray()
        return out

    def _keep(self, buf: bytearray, pos: int) -> None:
        self.buf = buf[pos:] if pos else buf


_OURS = frozenset({TEXT, BINARY, PING, PONG})


def _utf8(payload: bytes) -> bool:
    if payload.isascii():
        return True
    try:
        payload.decode()
    except UnicodeDecodeError:
        return False
    return True
