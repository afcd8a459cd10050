"""A simulated node in the benchmark's own process whose blocks come when it is
told (``emit``), stamped when they are sent: scenario 19's upstream
(``bench/bench_follow_fanout.py``), as scenario 9's ``Node`` is scenario 9's.

Its chain is ``simnode``'s (``simnode.chain.Chain`` on a clock this class
moves one block at a time): real, linked header hashes (a follow hashes each
header it places), a finalized block two behind the best one, and every legacy
call answered by ``simnode``'s method table (``chain_getHeader`` by hash,
``state_getRuntimeVersion``, ...), over HTTP POST and WebSocket alike. Head
subscriptions (new and finalized heads) are served here: each ``emit`` sends
the new best header to every new-heads subscription, then the new finalized
header to every finalized-heads one. Every call received is counted by method
(``calls``), as ``/_sim/arrivals`` counts a ``simnode``'s."""

from __future__ import annotations

import itertools
import json
import time
from collections import Counter
from typing import Any

import aiohttp
from aiohttp import web

from simnode.chain import Chain, ChainConfig
from simnode.rpc import Call, Dispatcher, parse

START_HEIGHT = 4_000_000
_KINDS = {
    "chain_subscribeNewHeads": "best",
    "chain_subscribeFinalizedHeads": "finalized",
    "chain_subscribeFinalisedHeads": "finalized",
}
_UNSUBSCRIBE = frozenset(
    {
        "chain_unsubscribeNewHeads",
        "chain_unsubscribeFinalizedHeads",
        "chain_unsubscribeFinalisedHeads",
    }
)
_NOTE = {"best": "chain_newHead", "finalized": "chain_finalizedHead"}


class HeadNode:
    def __init__(self, start_height: int = START_HEIGHT) -> None:
        self._now = 0.0  # the chain's clock: one block per second of it
        config = ChainConfig(block_time=1.0, epoch=0.0, start_height=start_height)
        self.chain = Chain(config, clock=lambda: self._now)
        self.dispatcher = Dispatcher(self.chain)
        self.subs: dict[str, tuple[web.WebSocketResponse, str]] = {}  # id -> (socket, kind)
        self.sent_at: dict[int, float] = {}  # block number -> when its head was sent
        self.calls: Counter[str] = Counter()  # calls received, by method
        self._ids = itertools.count(1)

    @property
    def head(self) -> int:
        return self.chain.best()

    def held(self) -> dict[str, int]:
        """Head subscriptions held here now, by kind."""
        return dict(Counter(kind for _, kind in self.subs.values()))

    def app(self) -> web.Application:
        app = web.Application(client_max_size=16 * 1_048_576)
        app.router.add_post("/{tail:.*}", self._post)
        app.router.add_get("/{tail:.*}", self._socket)
        return app

    async def _post(self, request: web.Request) -> web.StreamResponse:
        parsed = parse(await request.read())
        self._count(parsed.entries)
        return web.Response(body=self.dispatcher.respond(parsed), content_type="application/json")

    def _count(self, entries: Any) -> None:
        for e in entries:
            self.calls[e.method if isinstance(e, Call) else ""] += 1

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        try:
            async for msg in ws:
                if msg.type != aiohttp.WSMsgType.TEXT:
                    break
                parsed = parse(msg.data)
                self._count(parsed.entries)
                first = parsed.entries[0]
                if not parsed.batch and isinstance(first, Call) and first.method in _KINDS:
                    await self._subscribe(ws, first)
                elif not parsed.batch and isinstance(first, Call) and first.method in _UNSUBSCRIBE:
                    params = first.params if isinstance(first.params, list) else []
                    gone = bool(params) and self.subs.pop(str(params[0]), None) is not None
                    await ws.send_str(_answer(first.id, gone))
                else:
                    body = self.dispatcher.respond(parsed)
                    if body:
                        await ws.send_str(body.decode())
        finally:
            for sid in [s for s, (w, _) in self.subs.items() if w is ws]:
                del self.subs[sid]
        return ws

    async def _subscribe(self, ws: web.WebSocketResponse, call: Call) -> None:
        kind = _KINDS[call.method]
        sid = f"h{next(self._ids)}"
        self.subs[sid] = (ws, kind)
        await ws.send_str(_answer(call.id, sid))
        n = self.head if kind == "best" else self.chain.finalized()
        await ws.send_str(_note(kind, sid, self.chain.header(n)))  # the current head at once

    async def emit(self) -> int:
        """The next block: its head to every new-heads subscription (stamped
        first, as scenario 9's node stamps), then the finalized head to every
        finalized-heads one. Its number."""
        self._now += 1.0
        n = self.head
        best = self.chain.header(n)
        self.sent_at[n] = time.monotonic()
        for kind, header in (
            ("best", best),
            ("finalized", self.chain.header(self.chain.finalized())),
        ):
            for sid, (ws, k) in list(self.subs.items()):
                if k == kind and not ws.closed:
                    await ws.send_str(_note(kind, sid, header))
        return n


def _answer(call_id: Any, result: Any) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": call_id, "result": result})


def _note(kind: str, sid: str, header: dict[str, Any]) -> str:
    params = {"subscription": sid, "result": header}
    return json.dumps({"jsonrpc": "2.0", "method": _NOTE[kind], "params": params})
