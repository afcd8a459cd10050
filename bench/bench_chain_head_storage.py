"""Scenario 20: one ``chainHead_v1_storage`` operation of K ``value`` items
against K ``state_getStorage(key, hash)`` calls, on one WebSocket through
chainproxy, at one block the follow pinned; the upstream calls counted at the
node and the wall time of each.

One ``simnode`` (its own process, a block every 12 s) registered as
``node-rpc`` and ``node-wss``; chainproxy (mitmdump + addon) with
``proxy.new_spec.operations`` and ``storage_page_items`` at 128, so the K
items are one operation and one page. One client socket: ``chainHead_v1_follow``,
its newest finalized block, then per repetition, the order swapped each time
and fresh keys for each (no cache hit anywhere):

* ``storage``: ``chainHead_v1_storage(follow, block, K items, null)``, from
  the call to ``operationStorageDone`` (a ``chainHead_v1_continue`` for each
  ``operationWaitingForContinue``), every item's value checked;
* ``legacy``: K ``state_getStorage(key, block)`` sent at once (pipelined, as
  an SDK sends concurrent reads), from the first sent to the last answered,
  every value checked.

Upstream calls: the node's own log (``GET /_sim/arrivals``) of what reached it
from the proxy during each, its storage reads (``state_getStorage``,
``state_queryStorageAt``, ...) counted per call (a batch counts its entries).
Medians over the repetitions, after one round not recorded (warm-up).
``--node-latency-ms``: the node answers each call that late (its
``latency_ms`` fault), as a node across a network would.

    python bench/bench_chain_head_storage.py [--keys 100] [--reps 10] [--node-latency-ms 0]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.new_spec_stack import Proxy, proxy_config, sockets, start_proxy
from bench.results import JSON_MARK
from chainproxy.supervisor import Supervisor, free_port, wait_http
from simnode.chain import storage_value
from simnode.command import simnode_argv
from simnode.remote import http_json

FOLLOW_EVENT = "chainHead_v1_followEvent"
PREFIX = "26aa394eea5630e07c48ae0c9558cef7"  # twox128("System"): a key a node has values under
STORAGE_READS = ("state_getStorage", "state_getStorageAt", "state_queryStorageAt")
VARIANTS = ("storage", "legacy")


class Client:
    """One socket: answers by id, follow events in arrival order."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.answers: dict[int, asyncio.Future[Any]] = {}
        self.events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._next = 0
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            doc = json.loads(msg.data)
            if doc.get("method") == FOLLOW_EVENT:
                self.events.put_nowait(doc["params"]["result"])
            elif (fut := self.answers.pop(doc.get("id"), None)) is not None:
                fut.set_result(doc)

    async def send(self, method: str, params: list[Any]) -> asyncio.Future[Any]:
        """Send a call; its answer's future."""
        self._next += 1
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.answers[self._next] = fut
        doc = {"jsonrpc": "2.0", "id": self._next, "method": method, "params": params}
        await self.ws.send_str(json.dumps(doc))
        return fut

    async def ask(self, method: str, params: list[Any]) -> Any:
        doc = await (await self.send(method, params))
        if "error" in doc:
            raise RuntimeError(f"{method}: {doc['error']}")
        return doc["result"]

    async def event(self, kind: str) -> dict[str, Any]:
        while True:
            ev = await self.events.get()
            if ev["event"] == kind:
                return ev

    def close(self) -> None:
        self._reader.cancel()


def fresh_keys(n: int) -> list[str]:
    return [f"0x{PREFIX}{secrets.token_hex(16)}" for _ in range(n)]


async def storage_op(c: Client, sid: str, block: str, keys: list[str]) -> None:
    items = [{"key": k, "type": "value"} for k in keys]
    started = await c.ask("chainHead_v1_storage", [sid, block, items, None])
    if started.get("result") != "started" or started.get("discardedItems"):
        raise RuntimeError(f"chainHead_v1_storage: {started}")
    op, got = started["operationId"], {}
    while True:
        ev = await c.events.get()
        if ev.get("operationId") != op:
            continue
        if ev["event"] == "operationStorageItems":
            got.update({i["key"]: i.get("value") for i in ev["items"]})
        elif ev["event"] == "operationWaitingForContinue":
            await c.ask("chainHead_v1_continue", [sid, op])
        elif ev["event"] == "operationStorageDone":
            break
        else:
            raise RuntimeError(f"storage operation ended with {ev}")
    if got != {k: storage_value(k) for k in keys}:
        raise RuntimeError(f"{len(got)} items of {len(keys)}, or a value not the node's")


async def legacy_reads(c: Client, block: str, keys: list[str]) -> None:
    futures = [await c.send("state_getStorage", [k, block]) for k in keys]
    answers = await asyncio.gather(*futures)
    wrong = [a for a, k in zip(answers, keys, strict=True) if a.get("result") != storage_value(k)]
    if wrong:
        raise RuntimeError(f"{len(wrong)} of {len(keys)} state_getStorage wrong: {wrong[0]}")


def upstream_reads(node_url: str, since: float) -> tuple[int, int, dict[str, int]]:
    """Storage-read calls and requests that reached the node from the proxy
    since ``since`` (unix time), and every method seen (first methods of each)."""
    doc = http_json(f"{node_url}/_sim/arrivals?since={since}", timeout=5)
    calls = requests = 0
    methods: dict[str, int] = {}
    for a in doc["arrivals"]:
        if "chainproxy" not in a["agent"].lower():
            continue
        for m in a["methods"]:
            methods[m] = methods.get(m, 0) + 1
        if any(m in STORAGE_READS for m in a["methods"]):
            calls += a["calls"]
            requests += 1
    return calls, requests, methods


async def measure(proxy: Proxy, node_url: str, keys: int, reps: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    async with sockets(proxy.ws_url, ["127.0.0.1"]) as (ws,):
        c = Client(ws)
        try:
            sid = await c.ask("chainHead_v1_follow", [False])
            block = (await c.event("initialized"))["finalizedBlockHashes"][-1]
            for r in range(-1, reps):  # the first round warms up, not recorded
                for variant in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
                    batch = fresh_keys(keys)
                    since, t0 = time.time() - 0.001, time.monotonic()
                    if variant == "storage":
                        await storage_op(c, sid, block, batch)
                    else:
                        await legacy_reads(c, block, batch)
                    wall = time.monotonic() - t0
                    calls, requests, methods = await asyncio.to_thread(
                        upstream_reads, node_url, since
                    )
                    if r >= 0:
                        run = {"ms": wall * 1000, "calls": calls, "requests": requests}
                        runs[variant].append(run | {"methods": methods})
        finally:
            c.close()
    out: dict[str, Any] = {"keys": keys, "reps": reps}
    for v, rs in runs.items():
        out[v] = {
            "ms": statistics.median(r["ms"] for r in rs),
            "calls": statistics.median(r["calls"] for r in rs),
            "requests": statistics.median(r["requests"] for r in rs),
            "calls_each": [r["calls"] for r in rs],
            "methods": rs[-1]["methods"],
        }
    out["calls_ratio"] = out["legacy"]["calls"] / max(1, out["storage"]["calls"])
    out["time_ratio"] = out["legacy"]["ms"] / out["storage"]["ms"]
    return out


async def run(keys: int, reps: int, latency_ms: float) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-chs-"))
    sup = Supervisor(logdir=tmp)
    try:
        port = free_port()
        argv = simnode_argv(
            port, name="n", seed="finney", epoch=time.time() - 600, block_time=12.0,
            start_height=4_000_000,
        )  # fmt: skip
        node = sup.start("node", argv)
        node_url = f"http://127.0.0.1:{port}"
        await asyncio.to_thread(wait_http, f"{node_url}/_sim/state", node)
        if latency_ms:
            await asyncio.to_thread(
                http_json, f"{node_url}/_sim/control", {"latency_ms": latency_ms}
            )
        new_spec = {"operations": max(16, keys), "storage_page_items": max(64, keys)}
        proxy = await start_proxy(sup, tmp, proxy_config(tmp, node_url, {"new_spec": new_spec}))
        return await measure(proxy, node_url, keys, reps) | {"node_latency_ms": latency_ms}
    finally:
        sup.stop_all()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=100)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument(
        "--node-latency-ms", type=float, default=0.0, help="the node answers each call this late"
    )
    a = ap.parse_args()
    r = asyncio.run(run(a.keys, a.reps, a.node_latency_ms))
    for v in VARIANTS:
        d = r[v]
        print(
            f"{v}: {r['keys']} keys: {d['ms']:.1f} ms, {d['calls']:g} upstream storage calls"
            f" in {d['requests']:g} requests (median of {r['reps']}); methods {d['methods']}"
        )
    print(f"legacy ÷ storage: calls {r['calls_ratio']:.1f}x, wall time {r['time_ratio']:.2f}x")
    print(JSON_MARK + json.dumps(r))


if __name__ == "__main__":
    main()
