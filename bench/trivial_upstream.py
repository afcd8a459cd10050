"""A fast, trivial JSON-RPC upstream for the proxy benchmarks.

    python bench/trivial_upstream.py --port 0 [--seconds 900]

Raw asyncio HTTP/1.1 (keep-alive, no framework) and JSON-RPC over WebSocket
(a GET with an upgrade on any path: each text message a call or a batch,
answered in order; ``bench/wsframe.py``) in front of the simulator's
method table over a *frozen* chain: every answer is computed once through
``simnode`` (so the sidecar's probes see a healthy, synced finney
node and block hashes/headers are real-looking) and then served from a dict
keyed by (method, params). A request costs a JSON parse, a dict lookup and a
write (~20-40 µs), so the proxy in front of it is what gets measured.

Prints ``listening on http://127.0.0.1:PORT`` when ready; stops by itself after
``--seconds`` (a bound for a benchmark that died without cleaning up).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import wsframe
from simnode.chain import FINNEY_GENESIS, Chain, ChainConfig
from simnode.rpc import Dispatcher, RpcError

START_HEIGHT = 4_000_000
_DUMPS = json.JSONEncoder(separators=(",", ":")).encode


class Answers:
    """(method, params) -> the serialized ``"result":…`` or ``"error":…`` member."""

    def __init__(self) -> None:
        chain = Chain(
            ChainConfig(
                seed="finney",
                genesis=FINNEY_GENESIS,
                block_time=12.0,
                epoch=time.time(),
                start_height=START_HEIGHT,
                archive=True,
                chain_name="Bittensor",
            )
        )
        chain.set_frozen(True)
        self._dispatcher = Dispatcher(chain)
        self._memo: dict[tuple[str, str], bytes] = {}

    def member(self, method: Any, params: Any) -> bytes:
        key = (method if isinstance(method, str) else "", _DUMPS(params))
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        try:
            doc: dict[str, Any] = {"result": self._dispatcher.call(key[0], params)}
        except RpcError as e:
            doc = {"error": e.to_json()}
        except Exception:
            doc = {"error": {"code": -32602, "message": "Invalid params"}}
        out = _DUMPS(doc)[1:-1].encode()  # '"result":…' without the braces
        if len(self._memo) < 100_000:
            self._memo[key] = out
        return out

    def answer_one(self, obj: Any) -> bytes:
        if not isinstance(obj, dict):
            return (
                b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid request"}}'
            )
        rid = _DUMPS(obj.get("id")).encode()
        return (
            b'{"jsonrpc":"2.0","id":'
            + rid
            + b","
            + self.member(obj.get("method"), obj.get("params", []))
            + b"}"
        )

    def body(self, raw: bytes) -> bytes:
        try:
            doc = json.loads(raw)
        except ValueError:
            return b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}'
        if isinstance(doc, list):
            return b"[" + b",".join(self.answer_one(o) for o in doc) + b"]"
        return self.answer_one(doc)


class HttpRpc(asyncio.Protocol):
    """Minimal HTTP/1.1 server side: Content-Length bodies, keep-alive, pipelining."""

    def __init__(self, answers: Answers) -> None:
        self.answers = answers
        self.buf = b""
        self.transport: asyncio.Transport | None = None
        self.ws: wsframe.Parser | None = None  # after an upgrade: WebSocket frames

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self.ws is not None:
            self._ws_received(data)
            return
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1")
            lines = head.split("\r\n")
            length, close, ws_key = 0, False, ""
            for line in lines[1:]:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                if name == "content-length":
                    length = int(value.strip() or 0)
                elif name == "connection" and value.strip().lower() == "close":
                    close = True
                elif name == "sec-websocket-key":
                    ws_key = value.strip()
            if ws_key and lines[0].startswith("GET "):
                self._upgrade(ws_key, self.buf[end + 4 :])
                return
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            method = lines[0].split(" ", 1)[0]
            if method == "POST":
                status, out = b"200 OK", self.answers.body(body)
            else:
                status, out = b"404 Not Found", b'{"error":"POST JSON-RPC only"}'
            assert self.transport is not None
            self.transport.write(
                b"HTTP/1.1 "
                + status
                + b"\r\nContent-Type: application/json\r\nContent-Length: "
                + str(len(out)).encode()
                + (b"\r\nConnection: close" if close else b"")
                + b"\r\n\r\n"
                + out
            )
            if close:
                self.transport.close()
                return

    def _upgrade(self, key: str, rest: bytes) -> None:
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Accept: "
            + wsframe.accept_key(key).encode()
            + b"\r\n\r\n"
        )
        self.buf = b""
        self.ws = wsframe.Parser()
        if rest:
            self._ws_received(rest)

    def _ws_received(self, data: bytes) -> None:
        assert self.ws is not None and self.transport is not None
        out = []
        for opcode, payload in self.ws.feed(data):
            if opcode in (wsframe.TEXT, wsframe.BINARY):
                out.append(wsframe.frame(self.answers.body(payload)))
            elif opcode == wsframe.PING:
                out.append(wsframe.frame(payload, wsframe.PONG))
            elif opcode == wsframe.CLOSE:
                self.transport.write(b"".join(out) + wsframe.frame(payload[:2], wsframe.CLOSE))
                self.transport.close()
                return
        if out:
            self.transport.write(b"".join(out))


async def serve(host: str, port: int, seconds: float) -> None:
    answers = Answers()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: HttpRpc(answers), host, port, backlog=1024)
    bound = server.sockets[0].getsockname()[1]
    print(f"listening on http://{host}:{bound}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    except TimeoutError:
        pass
    server.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=900.0, help="stop by itself after this")
    args = ap.parse_args()
    asyncio.run(serve(args.host, args.port, args.seconds))


if __name__ == "__main__":
    main()
