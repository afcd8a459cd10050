"""The soak's WebSocket clients: calls over the socket and subscriptions,
judged per call and, for heads, per subscription (``tally.HeadLog``)."""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
from typing import Any

import aiohttp

from addon.chain.header_hash import header_hash  # the hash a node would give
from bench.soak.tally import Call, judge_item
from bench.soak.traffic import STORAGE_KEYS, Clients, call_mix

HEAD_METHODS = {"chain_newHead", "chain_finalizedHead"}


class WsClient:
    """One client holding one socket at a time; reconnects when it is closed."""

    def __init__(
        self, clients: Clients, ip: str, name: str, subscribe: list[tuple[str, list[Any]]]
    ):
        self.c = clients
        self.ip = ip
        self.name = name
        self.subscribe = subscribe
        self.ids = itertools.count(1)
        self.pending: dict[int, tuple[float, float, str, bool]] = {}  # id -> t, t0, method, sub
        self.sub_ids: dict[str, str] = {}  # subscription id -> method
        self.socket_no = 0

    async def run(self, pause_s: float) -> None:
        rng = random.Random(self.c.rng.random())
        while not self.c.stopping.is_set():
            self.socket_no += 1
            try:
                async with self.c._session(self.ip) as session:
                    async with session.ws_connect(self.c.ws_url, heartbeat=None) as ws:
                        await self._one_socket(ws, rng, pause_s)
            except (aiohttp.ClientError, TimeoutError, OSError) as e:
                self._fail_pending(f"socket failed: {e!r}"[:120])
                if not self.c.stopping.is_set():
                    self.c.tally.sockets_closed.append((self.c.now(), f"{self.name}: {e!r}"[:160]))
                    await asyncio.sleep(0.5)

    async def _one_socket(
        self, ws: aiohttp.ClientWebSocketResponse, rng: random.Random, pause_s: float
    ) -> None:
        self.sub_ids.clear()
        for method, params in self.subscribe:
            await self._send(ws, method, params, sub=True)
        reader = asyncio.create_task(self._read(ws))
        try:
            while not self.c.stopping.is_set() and not reader.done():
                m, p = call_mix(rng, self.c.chain)
                await self._send(ws, m, p, sub=False)
                try:
                    await asyncio.wait_for(asyncio.shield(reader), pause_s * rng.uniform(0.5, 1.5))
                except TimeoutError:
                    pass
            if reader.done():
                reader.result()  # re-raise what ended it
                if not self.c.stopping.is_set():
                    code = ws.close_code
                    self._fail_pending(f"socket closed by the proxy ({code})")
                    self.c.tally.sockets_closed.append((self.c.now(), f"{self.name}: close {code}"))
        finally:
            if not reader.done():
                reader.cancel()
            # calls in flight when the run ends are neither answered nor failed
            if self.c.stopping.is_set():
                self.pending.clear()

    async def _send(
        self, ws: aiohttp.ClientWebSocketResponse, method: str, params: list[Any], *, sub: bool
    ) -> None:
        call_id = next(self.ids)
        self.pending[call_id] = (self.c.now(), time.monotonic(), method, sub)
        await ws.send_str(
            json.dumps({"jsonrpc": "2.0", "id": call_id, "method": method, "params": params})
        )

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        async for msg in ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            doc = json.loads(msg.data)
            if "id" in doc and doc["id"] in self.pending:
                self._answer(doc)
            elif "method" in doc:
                self._notification(doc)

    def _answer(self, doc: dict[str, Any]) -> None:
        t, t0, method, sub = self.pending.pop(doc["id"])
        ms = (time.monotonic() - t0) * 1000
        outcome, recorded, detail = judge_item(doc, expect_refusal=False)
        kind = "subscribe" if sub else "ws"
        self.c.tally.add(Call(t, kind, method, outcome, ms, recorded, detail))
        if sub and outcome == "ok":
            self.sub_ids[str(doc["result"])] = method

    def _notification(self, doc: dict[str, Any]) -> None:
        params = doc.get("params") or {}
        sub_id = str(params.get("subscription"))
        result = params.get("result")
        if doc["method"] in HEAD_METHODS and isinstance(result, dict):
            number = int(result["number"], 16)
            key = f"{self.name}#{self.socket_no}/{doc['method']}/{sub_id}"
            parent = str(result.get("parentHash", ""))
            self.c.tally.head(key).add(self.c.now(), number, header_hash(result) or "", parent)
        else:
            self.c.tally.other_notifications += 1

    def _fail_pending(self, why: str) -> None:
        for t, t0, method, sub in self.pending.values():
            ms = (time.monotonic() - t0) * 1000
            self.c.tally.add(Call(t, "subscribe" if sub else "ws", method, "error", ms, False, why))
        self.pending.clear()


def subscriptions_for(i: int) -> list[tuple[str, list[Any]]]:
    """Every socket follows new heads; some also finalized heads, a storage key,
    the runtime version (what polkadot.js and the bittensor SDK open)."""
    subs: list[tuple[str, list[Any]]] = [("chain_subscribeNewHeads", [])]
    if i % 2 == 0:
        subs.append(("chain_subscribeFinalizedHeads", []))
    if i % 3 == 0:
        subs.append(("state_subscribeStorage", [[STORAGE_KEYS[0]]]))
    if i % 4 == 1:
        subs.append(("state_subscribeRuntimeVersion", []))
    return subs
