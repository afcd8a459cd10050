"""Subscription fan-out: N subscribers of ``chain_subscribeNewHeads`` over S
client sockets through chainproxy (real mitmdump + addon), fed by one node.
Each socket is a client of its own, from a loopback address of its own (as S
SDK processes would be): the proxy's per-client socket cap
(``proxy.websocket.max_connections_per_client``, 32) stays at its default.

The node is a small WebSocket server in this process that emits a head on
demand and stamps when it sent it (one clock for node and clients: the same
process). Reported: upstream subscriptions at the node (goal 1), the p50/p99
from the node's notification to the *last* subscriber of each block, the p99
over every delivery, and the proxy's CPU per delivered notification.

    python bench/bench_fanout.py [--subscribers 1000] [--sockets 50] [--blocks 40]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chainproxy.commands import proxy_argv
from chainproxy.supervisor import Supervisor, free_port, wait_http

BIN = Path(sys.executable).parent


def header(n: int) -> dict[str, Any]:
    return {
        "parentHash": f"0x{n - 1:064x}",
        "number": hex(n),
        "stateRoot": "0x" + "11" * 32,
        "extrinsicsRoot": "0x" + "22" * 32,
        "digest": {"logs": []},
    }


class Node:
    """Serves chain_subscribeNewHeads (and the reads a gap fill uses)."""

    def __init__(self) -> None:
        self.head = 1000
        self.subs: dict[str, web.WebSocketResponse] = {}
        self.sent_at: dict[int, float] = {}
        self._ids = itertools.count(1)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        async for msg in ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                break
            doc = json.loads(msg.data)
            method, cid = doc.get("method"), doc.get("id")
            if method == "chain_subscribeNewHeads":
                sid = f"n{next(self._ids)}"
                self.subs[sid] = ws
                await ws.send_str(json.dumps({"jsonrpc": "2.0", "id": cid, "result": sid}))
                await ws.send_str(self._note(sid, self.head))
            elif method == "chain_unsubscribeNewHeads":
                ok = self.subs.pop(doc["params"][0], None) is not None
                await ws.send_str(json.dumps({"jsonrpc": "2.0", "id": cid, "result": ok}))
            elif method == "chain_getBlockHash":
                n = doc["params"][0]
                answer = {"jsonrpc": "2.0", "id": cid, "result": f"0x{n:064x}"}
                await ws.send_str(json.dumps(answer))
            elif method == "chain_getHeader":
                n = int(doc["params"][0], 16)
                await ws.send_str(json.dumps({"jsonrpc": "2.0", "id": cid, "result": header(n)}))
            else:
                await ws.send_str(json.dumps({"jsonrpc": "2.0", "id": cid, "result": None}))
        for sid in [s for s, w in self.subs.items() if w is ws]:
            del self.subs[sid]
        return ws

    def _note(self, sid: str, n: int) -> str:
        params = {"subscription": sid, "result": header(n)}
        return json.dumps({"jsonrpc": "2.0", "method": "chain_newHead", "params": params})

    async def emit(self) -> None:
        self.head += 1
        self.sent_at[self.head] = time.monotonic()
        for sid, ws in list(self.subs.items()):
            await ws.send_str(self._note(sid, self.head))


def client_ips(n: int) -> list[str]:
    """``n`` loopback source addresses, one client each (127.0.9.2, 127.0.9.3, ...)."""
    return [f"127.0.{9 + i // 250}.{2 + i % 250}" for i in range(n)]


def proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def run(subscribers: int, sockets: int, blocks: int, interval_s: float) -> dict[str, Any]:
    node = Node()
    app = web.Application()
    app.router.add_get("/{tail:.*}", node.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    node_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", node_port).start()
    tmp = Path(tempfile.mkdtemp(prefix="bench-fanout-"))
    sidecar_port, proxy_port = free_port(), free_port()
    config = {
        "proxy": {
            "networks": ["finney"],
            "rate_limit": {"requests": 1_000_000, "window_s": 60},
            "websocket": {"max_subscriptions": 1024, "max_queued_notifications": 100_000},
        },
        "sidecar": {"url": f"http://127.0.0.1:{sidecar_port}", "port": sidecar_port},
        "data_dir": str(tmp / "data"),
        "registry": {
            "endpoints": [
                {"url": f"ws://127.0.0.1:{node_port}", "provider": "n", "kind": "node-wss"}
                | {"network": "finney"},
            ]
        },
    }
    (tmp / "config.yaml").write_text(yaml.safe_dump(config))
    sup = Supervisor(logdir=tmp)
    argv = proxy_argv(
        BIN / "mitmdump", tmp / "config.yaml", config["sidecar"]["url"], port=proxy_port, quiet=True
    )
    proxy = sup.start("mitmdump", argv)
    received: dict[int, list[float]] = {}
    try:
        await asyncio.to_thread(wait_http, f"http://127.0.0.1:{proxy_port}/rpc/", proxy)
        url = f"ws://127.0.0.1:{proxy_port}/rpc/v1/finney"
        per_socket = subscribers // sockets
        async with contextlib.AsyncExitStack() as stack:
            # one client per socket, each from an address of its own: the proxy counts
            # sockets per client address (proxy.websocket.max_connections_per_client)
            conns = []
            for ip in client_ips(sockets):
                connector = aiohttp.TCPConnector(local_addr=(ip, 0))
                s = await stack.enter_async_context(aiohttp.ClientSession(connector=connector))
                conns.append(await s.ws_connect(url, max_msg_size=0))

            async def reader(ws: aiohttp.ClientWebSocketResponse) -> None:
                async for msg in ws:
                    doc = json.loads(msg.data)
                    if doc.get("method") == "chain_newHead":
                        n = int(doc["params"]["result"]["number"], 16)
                        received.setdefault(n, []).append(time.monotonic())

            readers = [asyncio.create_task(reader(ws)) for ws in conns]
            for ws in conns:
                for i in range(per_socket):
                    sub = {"jsonrpc": "2.0", "id": i, "method": "chain_subscribeNewHeads"}
                    await ws.send_str(json.dumps(sub | {"params": []}))
            total = per_socket * sockets
            await _all_have(received, node, total)
            cpu0 = proc_cpu_s(proxy.pid)
            first = node.head + 1
            for _ in range(blocks):
                await node.emit()
                await asyncio.sleep(interval_s)
            await _all_have(received, node, total)
            cpu = proc_cpu_s(proxy.pid) - cpu0
            upstream_subs = len(node.subs)  # before the sockets close
            for ws in conns:
                await ws.close()
            for t in readers:
                t.cancel()
    finally:
        sup.stop_all()
        await runner.cleanup()
    last_ms, every_ms = [], []
    for n in range(first, node.head + 1):
        times = received.get(n, [])
        every_ms += [(t - node.sent_at[n]) * 1000 for t in times]
        if times:
            last_ms.append((max(times) - node.sent_at[n]) * 1000)
    deliveries = len(every_ms)

    def q(xs: list[float], p: float) -> float:
        return statistics.quantiles(xs, n=100)[int(p) - 1] if len(xs) > 1 else xs[0]

    return {
        "subscribers": total,
        "sockets": sockets,
        "upstream_subscriptions": upstream_subs,
        "blocks": blocks,
        "deliveries": deliveries,
        "expected": blocks * total,
        "last_p50_ms": q(last_ms, 50),
        "last_p99_ms": q(last_ms, 99),
        "every_p99_ms": q(every_ms, 99),
        "cpu_us_per_notification": cpu / max(1, deliveries) * 1e6,
    }


async def _all_have(received: dict[int, list[float]], node: Node, total: int) -> None:
    """Every subscriber has the node's current head (bounded wait)."""
    async with asyncio.timeout(60):
        while len(received.get(node.head, [])) < total:  # noqa: ASYNC110 - polled by design
            await asyncio.sleep(0.05)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--subscribers", type=int, default=1000)
    ap.add_argument("--sockets", type=int, default=50)
    ap.add_argument("--blocks", type=int, default=40)
    ap.add_argument("--interval", type=float, default=0.25, help="seconds between blocks")
    a = ap.parse_args()
    r = asyncio.run(run(a.subscribers, a.sockets, a.blocks, a.interval))
    print(
        f"fan-out: {r['subscribers']} subscribers over {r['sockets']} sockets -> "
        f"{r['upstream_subscriptions']} upstream subscription(s); {r['deliveries']}/"
        f"{r['expected']} notifications delivered\n"
        f"fan-out: node notification -> last subscriber: p50 {r['last_p50_ms']:.1f} ms, "
        f"p99 {r['last_p99_ms']:.1f} ms; every delivery p99 {r['every_p99_ms']:.1f} ms\n"
        f"fan-out: proxy CPU {r['cpu_us_per_notification']:.1f} µs per delivered notification"
    )
    print("BENCHJSON-FANOUT " + json.dumps(r))


if __name__ == "__main__":
    main()
