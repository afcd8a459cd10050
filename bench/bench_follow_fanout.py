"""Scenario 19: ``chainHead_v1_follow`` fan-out beside scenario 9's legacy
fan-out, on one proxy and one node, measured the way scenario 9 measures.

N followers over S client sockets (``proxy.new_spec.follows_per_socket`` =
N/S), each socket a client of its own from a loopback address of its own, as
in scenario 9 (1,000 over 50 sockets). The node (``bench/head_node.py``) is in
this process and stamps each head when it sends it; its chain is
``simnode``'s, with real header hashes and a finalized block two behind the
best one. Per block a follow gets ``newBlock``, ``bestBlockChanged`` and
``finalized``, and unpins what was finalized and pruned (one
``chainHead_v1_unpin`` per follow per block, as a client does; with
``proxy.new_spec.pinned_blocks`` at 16, below the blocks of a phase, a follow
that did not unpin would be stopped). ``--no-unpin``: no unpin calls (and
``pinned_blocks`` above the blocks sent).

Phases alternate, legacy and follow, the order swapped each round, each with
fresh sockets: ``legacy`` is scenario 9's client (``chain_subscribeNewHeads``
N times over S sockets), ``follow`` the same number of follows. Reported per
kind, as scenario 9 does: the p50/p99 from the node's notification to the
*last* subscriber of each block (for follows: its ``newBlock``), the p99 over
every delivery, the first-to-last spread; the proxy's CPU per delivered
notification; for follows the head subscriptions held at the node (goal: 2,
new and finalized heads, however many follows) and the node's calls per block
(the runtime of each new block, one ``state_getRuntimeVersion``).

    python bench/bench_follow_fanout.py [--subscribers 1000] [--sockets 50]
        [--blocks 30] [--rounds 2] [--interval 0.25] [--no-unpin]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_fanout import proc_cpu_s
from bench.head_node import HeadNode
from bench.new_spec_stack import Proxy, client_ips, proxy_config, q, sockets, start_proxy
from bench.results import JSON_MARK
from chainproxy.supervisor import Supervisor, free_port

FOLLOW_EVENT = "chainHead_v1_followEvent"
UNPIN_IDS = 1_000_000  # ids of unpin calls start here; subscribe calls count from 0


@dataclass
class Phase:
    """One phase's deliveries and what the node and the proxy did meanwhile."""

    kind: str  # legacy or follow
    received: dict[int, list[float]] = field(default_factory=dict)  # block -> arrival times
    events: Counter[str] = field(default_factory=Counter)  # follow events by name
    measured: Counter[str] = field(default_factory=Counter)  # ... sent while measured
    unpins: int = 0
    unpin_errors: int = 0
    first: int = 0  # first measured block
    last: int = 0
    cpu_s: float = 0.0
    held: dict[str, int] = field(default_factory=dict)  # node head subscriptions by kind
    calls: Counter[str] = field(default_factory=Counter)  # node calls while measured
    sent_at: dict[int, float] = field(default_factory=dict)  # block -> the node sent its head


class FollowClient:
    """One socket's follows: events in, unpins out."""

    def __init__(
        self, ws: aiohttp.ClientWebSocketResponse, node: HeadNode, phase: Phase, unpin: bool
    ) -> None:
        self.ws, self.node, self.phase, self.unpin = ws, node, phase, unpin
        self.held: dict[str, list[str]] = {}  # follow id -> finalized hashes still pinned
        self._ids = iter(range(UNPIN_IDS, 10**9))

    async def read(self) -> None:
        ph = self.phase
        async for msg in self.ws:
            doc = json.loads(msg.data)
            if doc.get("method") != FOLLOW_EVENT:
                if isinstance(doc.get("id"), int) and doc["id"] >= UNPIN_IDS and "error" in doc:
                    ph.unpin_errors += 1
                continue
            sid, ev = doc["params"]["subscription"], doc["params"]["result"]
            name = ev["event"]
            ph.events[name] += 1
            if name == "newBlock":
                n = self.node.chain.number_of(ev["blockHash"])
                if n is not None:
                    ph.received.setdefault(n, []).append(time.monotonic())
            elif name == "initialized":
                self.held[sid] = list(ev["finalizedBlockHashes"])
            elif name == "finalized" and self.unpin:
                await self._unpin(sid, ev)

    async def _unpin(self, sid: str, ev: dict[str, Any]) -> None:
        """What was pinned and is now behind the newest finalized block: the
        finalized hashes kept so far, the newly finalized but the newest, the pruned."""
        fin = ev["finalizedBlockHashes"]
        gone = [*self.held.get(sid, []), *fin[:-1], *ev["prunedBlockHashes"]]
        self.held[sid] = fin[-1:]
        hashes = list(dict.fromkeys(gone))
        if hashes:
            self.phase.unpins += 1
            doc = {"jsonrpc": "2.0", "id": next(self._ids), "method": "chainHead_v1_unpin"}
            await self.ws.send_str(json.dumps(doc | {"params": [sid, hashes]}))


async def legacy_reader(ws: aiohttp.ClientWebSocketResponse, phase: Phase) -> None:
    """Scenario 9's reader."""
    async for msg in ws:
        doc = json.loads(msg.data)
        if doc.get("method") == "chain_newHead":
            n = int(doc["params"]["result"]["number"], 16)
            phase.received.setdefault(n, []).append(time.monotonic())


async def run_phase(
    kind: str,
    proxy: Proxy,
    node: HeadNode,
    ips: list[str],
    per_socket: int,
    blocks: int,
    interval_s: float,
    unpin: bool,
) -> Phase:
    ph = Phase(kind)
    total = per_socket * len(ips)
    async with sockets(proxy.ws_url, ips) as conns:
        if kind == "legacy":
            readers = [asyncio.create_task(legacy_reader(ws, ph)) for ws in conns]
            method, params = "chain_subscribeNewHeads", []
        else:
            clients = [FollowClient(ws, node, ph, unpin) for ws in conns]
            readers = [asyncio.create_task(c.read()) for c in clients]
            method, params = "chainHead_v1_follow", [True]
        for ws in conns:
            for i in range(per_socket):
                await ws.send_str(
                    json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params})
                )
        await _all_have(ph, node, total)
        calls0, cpu0 = Counter(node.calls), proc_cpu_s(proxy.child.pid)
        events0 = Counter(ph.events)
        ph.first = node.head + 1
        for _ in range(blocks):
            await node.emit()
            await asyncio.sleep(interval_s)
        await _all_have(ph, node, total)
        ph.cpu_s = proc_cpu_s(proxy.child.pid) - cpu0
        ph.last = node.head
        ph.calls = node.calls - calls0
        ph.measured = ph.events - events0
        ph.held = node.held()  # before the sockets close
        ph.sent_at = {n: node.sent_at[n] for n in range(ph.first, ph.last + 1)}
        for t in readers:
            t.cancel()
    return ph


async def _all_have(ph: Phase, node: HeadNode, total: int) -> None:
    """Every subscriber has the node's current head (bounded wait)."""
    async with asyncio.timeout(60):
        while len(ph.received.get(node.head, [])) < total:  # noqa: ASYNC110 - polled by design
            await asyncio.sleep(0.05)


def summary(phases: list[Phase], subscribers: int) -> dict[str, Any]:
    """One kind's figures over its phases, scenario 9's and more."""
    last_ms, every_ms, spread_ms = [], [], []
    blocks = deliveries = 0
    for ph in phases:
        node_sent = ph.sent_at
        for n in range(ph.first, ph.last + 1):
            times = ph.received.get(n, [])
            blocks += 1
            deliveries += len(times)
            every_ms += [(t - node_sent[n]) * 1000 for t in times]
            if times:
                last_ms.append((max(times) - node_sent[n]) * 1000)
                spread_ms.append((max(times) - min(times)) * 1000)
    events = sum((ph.events for ph in phases), Counter())
    measured = sum((ph.measured for ph in phases), Counter())
    cpu = sum(ph.cpu_s for ph in phases)
    # every notification sent while measured: a head each (legacy), or each event
    notes = deliveries if phases[0].kind == "legacy" else measured.total()
    return {
        "blocks": blocks,
        "deliveries": deliveries,
        "expected": blocks * subscribers,
        "last_p50_ms": q(last_ms, 50),
        "last_p99_ms": q(last_ms, 99),
        "every_p99_ms": q(every_ms, 99),
        "spread_p99_ms": q(spread_ms, 99),
        "cpu_us_per_notification": cpu / max(1, notes) * 1e6,
        "cpu_us_per_head": cpu / max(1, deliveries) * 1e6,
        "cpu_ms_per_block": cpu * 1000 / max(1, blocks),
        "events": dict(measured),
        "stops": events.get("stop", 0),
        "unpins": sum(ph.unpins for ph in phases),
        "unpin_errors": sum(ph.unpin_errors for ph in phases),
        "upstream_subscriptions": max(sum(ph.held.values()) for ph in phases),
        "held": phases[-1].held,
        "node_calls_per_block": {
            m: c / max(1, blocks) for m, c in sum((ph.calls for ph in phases), Counter()).items()
        },
    }


async def run(
    subscribers: int, n_sockets: int, blocks: int, rounds: int, interval_s: float, unpin: bool
) -> dict[str, Any]:
    per_socket = max(1, subscribers // n_sockets)
    node = HeadNode()
    runner = web.AppRunner(node.app(), access_log=None)
    await runner.setup()
    node_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", node_port).start()
    tmp = Path(tempfile.mkdtemp(prefix="bench-follow-"))
    new_spec = {
        "follows_per_socket": max(2, per_socket),
        # a follow that did not unpin would pass this within a phase and be stopped
        "pinned_blocks": 16 if unpin else blocks + 64,
    }
    websocket = {"max_subscriptions": 1024, "max_queued_notifications": 100_000}
    config = proxy_config(
        tmp, f"http://127.0.0.1:{node_port}", {"websocket": websocket, "new_spec": new_spec}
    )
    sup = Supervisor(logdir=tmp)
    phases: dict[str, list[Phase]] = {"legacy": [], "follow": []}
    try:
        proxy = await start_proxy(sup, tmp, config)
        block = 20
        for r in range(rounds):
            order = ("legacy", "follow") if r % 2 == 0 else ("follow", "legacy")
            for kind in order:
                ips = client_ips(n_sockets, block)
                block += 1
                ph = await run_phase(kind, proxy, node, ips, per_socket, blocks, interval_s, unpin)
                phases[kind].append(ph)
    finally:
        sup.stop_all()
        await runner.cleanup()
    total = per_socket * n_sockets
    out = {k: summary(v, total) for k, v in phases.items()}
    return {
        "subscribers": total,
        "sockets": n_sockets,
        "blocks_per_phase": blocks,
        "rounds": rounds,
        "interval_s": interval_s,
        "unpin": unpin,
        **out,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--subscribers", type=int, default=1000)
    ap.add_argument("--sockets", type=int, default=50)
    ap.add_argument("--blocks", type=int, default=30, help="blocks per phase")
    ap.add_argument("--rounds", type=int, default=2, help="legacy and follow phases, each")
    ap.add_argument("--interval", type=float, default=0.25, help="seconds between blocks")
    ap.add_argument("--no-unpin", action="store_true", help="followers never unpin")
    a = ap.parse_args()
    r = asyncio.run(run(a.subscribers, a.sockets, a.blocks, a.rounds, a.interval, not a.no_unpin))
    for kind in ("legacy", "follow"):
        d = r[kind]
        print(
            f"{kind}: {r['subscribers']} over {r['sockets']} sockets, {d['deliveries']}/"
            f"{d['expected']} head notifications; node -> last p50 {d['last_p50_ms']:.1f} ms,"
            f" p99 {d['last_p99_ms']:.1f} ms; every p99 {d['every_p99_ms']:.1f} ms; first ->"
            f" last p99 {d['spread_p99_ms']:.1f} ms; {d['cpu_us_per_notification']:.1f} µs"
            f" proxy CPU per notification; node subscriptions {d['held']}"
        )
    print(JSON_MARK + json.dumps(r))


if __name__ == "__main__":
    main()
