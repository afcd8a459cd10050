"""The soak's clients. Each has a loopback address of its own (127.0.0.N:
HAProxy appends it to X-Forwarded-For, so each has its own quota, as distinct
machines would) and writes what it saw into the ``Tally``.

* HTTP clients: heads, unpinned and hash-pinned storage reads, block hashes
  and blocks, batches, now and then an off-allowlist write (refused: 403);
* one greedy client: bursts of batches beyond its quota (429s expected);
* WebSocket clients: calls over the socket and subscriptions (new heads on
  every socket; finalized heads, storage and runtime version on some). A
  socket closed under a client is an error; it reconnects and subscribes
  again (a new subscription id: heads are judged per subscription).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from bench.soak.tally import Call, Tally, judge_item

STORAGE_KEYS = [
    "0x26aa394eea5630e07c48ae0c9558cef702a5c1b19ab7a04f536c519aca4983ac",  # System.Number
    "0x26aa394eea5630e07c48ae0c9558cef7b99d880ec681799c0cf30e8886371da9",
    "0x658faa385070e074c85bf6b568cf0555aab1b4e78e1ea8305462ee53b3686dc8",
]
REFUSED = ("author_submitExtrinsic", ["0x00"])
CALL_TIMEOUT_S = 30.0  # beyond the proxy's failover deadline: a timeout is a failure


@dataclass
class Chain:
    """What the clients know of the chain: recent heads seen through the proxy."""

    recent: list[tuple[int, str]] = field(default_factory=list)

    def learn(self, header: Any, block_hash: str | None = None) -> None:
        if not isinstance(header, dict) or not isinstance(header.get("number"), str):
            return
        n = int(header["number"], 16)
        if block_hash and (not self.recent or n > self.recent[-1][0]):
            self.recent.append((n, block_hash))
            del self.recent[:-64]

    def pick(self, rng: random.Random) -> tuple[int, str] | None:
        return rng.choice(self.recent[-20:]) if self.recent else None


def call_mix(rng: random.Random, chain: Chain) -> tuple[str, list[Any]]:
    """One read as a validator's or explorer's client would send it."""
    known = chain.pick(rng)
    r = rng.random()
    if r < 0.25 or known is None:
        return "chain_getHeader", []
    if r < 0.40:
        return "state_getStorage", [rng.choice(STORAGE_KEYS)]
    if r < 0.55:
        return "state_getStorage", [rng.choice(STORAGE_KEYS), known[1]]
    if r < 0.68:
        return "chain_getBlockHash", [known[0]]
    if r < 0.80:
        return "chain_getBlock", [known[1]]
    if r < 0.88:
        return "chain_getHeader", [known[1]]
    if r < 0.94:
        return "state_getRuntimeVersion", []
    return "system_health", []


class Clients:
    def __init__(self, url: str, tally: Tally, *, seed: int, started: float) -> None:
        self.url = url.rstrip("/") + "/rpc/v1/finney"
        self.ws_url = self.url.replace("http://", "ws://")
        self.tally = tally
        self.rng = random.Random(seed)
        self.started = started
        self.chain = Chain()
        self.stopping = asyncio.Event()

    def now(self) -> float:
        return time.monotonic() - self.started

    def _session(self, ip: str) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(local_addr=(ip, 0), limit=8)
        timeout = aiohttp.ClientTimeout(total=CALL_TIMEOUT_S)
        return aiohttp.ClientSession(connector=connector, timeout=timeout)

    # --- HTTP --------------------------------------------------------------------------

    async def post(
        self, session: aiohttp.ClientSession, body: Any, kind: str, refusals: set[int]
    ) -> list[Any] | None:
        """Send one body; judge each call in it; the answers (None on failure)."""
        items = body if isinstance(body, list) else [body]
        t0 = time.monotonic()
        t = self.now()
        try:
            async with session.post(self.url, json=body) as resp:
                raw = await resp.read()
                status = resp.status
            doc = json.loads(raw)
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            ms = (time.monotonic() - t0) * 1000
            for item in items:
                self.tally.add(Call(t, kind, item["method"], "error", ms, False, repr(e)[:120]))
            return None
        ms = (time.monotonic() - t0) * 1000
        answers = doc if isinstance(doc, list) else [doc] * len(items)
        if len(answers) != len(items):
            answers = [doc] * len(items)  # a whole-batch refusal (e.g. over quota)
        for item, answer in zip(items, answers, strict=True):
            outcome, recorded, detail = judge_item(answer, expect_refusal=item["id"] in refusals)
            if outcome == "error" and status != 200:
                detail = f"HTTP {status} {detail}"
            self.tally.add(Call(t, kind, item["method"], outcome, ms, recorded, detail))
        return answers

    async def http_client(self, ip: str, pause_s: float) -> None:
        rng = random.Random(self.rng.random())
        async with self._session(ip) as session:
            n = 0
            while not self.stopping.is_set():
                n += 1
                refusals: set[int] = set()
                if rng.random() < 0.12:
                    body: Any = [
                        {"jsonrpc": "2.0", "id": n * 100 + i, "method": m, "params": p}
                        for i, (m, p) in enumerate(
                            call_mix(rng, self.chain) for _ in range(rng.randint(2, 5))
                        )
                    ]
                    kind = "batch"
                elif rng.random() < 0.04:
                    body = {"jsonrpc": "2.0", "id": n, "method": REFUSED[0], "params": REFUSED[1]}
                    refusals.add(n)
                    kind = "http"
                else:
                    m, p = call_mix(rng, self.chain)
                    body = {"jsonrpc": "2.0", "id": n, "method": m, "params": p}
                    kind = "http"
                answers = await self.post(session, body, kind, refusals)
                if answers is not None and not isinstance(body, list):
                    await self._learn(session, body, answers[0])
                await asyncio.sleep(pause_s * rng.uniform(0.5, 1.5))

    async def _learn(self, session: aiohttp.ClientSession, body: Any, answer: Any) -> None:
        """A head seen: ask its hash (a block-pinned read of its own)."""
        if body["method"] != "chain_getHeader" or body["params"] or not isinstance(answer, dict):
            return
        header = answer.get("result")
        if not isinstance(header, dict):
            return
        got = await self.post(
            session,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "chain_getBlockHash",
                "params": [header["number"]],
            },
            "http",
            set(),
        )
        if got and isinstance(got[0], dict) and isinstance(got[0].get("result"), str):
            self.chain.learn(header, got[0]["result"])

    async def greedy_client(self, ip: str, every_s: float, burst: int) -> None:
        """Bursts past the quota: most of each burst is refused (429), never an error."""
        async with self._session(ip) as session:
            n = 0
            while not self.stopping.is_set():
                for _ in range(burst // 20):
                    n += 1
                    body = [
                        {"jsonrpc": "2.0", "id": n * 100 + i, "method": "system_health"}
                        for i in range(20)
                    ]
                    await self.post(session, body, "batch", set())
                try:
                    await asyncio.wait_for(self.stopping.wait(), every_s)
                except TimeoutError:
                    pass
