"""Scenario 17 (validator fleet, issue 25): with pre-warm on and off, the first
client's sync latency after each block, and the upstream calls per block.

Three simulated nodes, a block every ``BLOCK_S``, each call costing
``NODE_LATENCY_MS`` plus ``PER_MIB_MS`` per MiB answered (``BYTE_SLOTS`` per
node), also registered as ``node-wss`` (head subscriptions go upstream). One
sidecar; two chainproxy processes on core 1, caches of their own: ``on``
(``proxy.prewarm`` defaults) and ``off`` (``max_reads: 0``). ``CLIENTS``
validators on their own 127.0.x.y addresses sync at each new block: ``SYNC``
(``get_all_dynamic_info``, ``get_neurons_lite`` of three subnets, three
storage reads, a keys page), hash-less, at once, over HTTP keep-alive. Two
triggers: ``subscription`` (each holds ``chain_subscribeNewHeads`` on a
WebSocket through the proxy, as the SDK does) and ``polling``
(``chain_getHeader`` every ``POLL_S``, phases spread; one more socket holds a
head subscription, as some client does on any shared gateway).

A controller socket counts blocks: each variant runs ``WARM`` unmeasured
blocks (pre-warm needs 2 clients at each of the last 2 blocks), then n
measured. A block's *first client* is the one that learned it first; its
latency runs from then to its last answer. Upstream calls: the sync's methods
in the nodes' arrival logs (``/_sim/arrivals``) sent by the proxies (their
``User-Agent``), from mid-block before the first measured block to mid-block
after the last. The sidecar's probes are not counted: its state probes (three
``state_getStorage`` per endpoint a round) used to add ~3 a block to a phase
that a round fell in.
Variants alternate, order rotated each round; ``chainproxy_prewarm_total``
comes from the sidecar's ``/metrics``, before and after.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from bench.context import Context
from bench.cross_check_cost import sidecar_metric
from bench.fleet_figures import (
    READ_METHODS,
    TRIGGERS,
    Phase,
    Sync,
    block_number,
    cache_kind,
    proxy_reads,
    summarise,
    verdict,
)
from bench.report import f0, f2
from bench.stack import Node
from chainproxy.supervisor import wait_http

CLIENTS = 20
BLOCK_S = 3.0
SMOKE_BLOCK_S = 1.0  # bench/run.py --smoke: a block a second (nothing timed is read)
NODE_LATENCY_MS, PER_MIB_MS, BYTE_SLOTS = 40.0, 500.0, 4
POLL_S = 1.0
WARM = 2  # blocks of each variant that build the demand, not measured
PREWARM = ("on", "off")
SUBTENSOR = "0x658faa385070e074c85bf6b568cf0555"  # twox128("SubtensorModule")
NETUIDS = (1, 2, 3)
DYNAMIC_INFO = "SubnetInfoRuntimeApi_get_all_dynamic_info"
OUTCOMES = ("fetched", "used", "wasted", "skipped")
WALL_S = (120.0, 360.0)  # what this adds to the runner's time limit: quick, full


def neurons_lite_params(netuid: int) -> str:
    """``get_neurons_lite(netuid: u16)``'s SCALE argument, as hex."""
    return "0x" + netuid.to_bytes(2, "little").hex()


def sync_calls() -> list[tuple[str, list[Any]]]:
    """One metagraph-style sync: every read without a block hash."""
    calls: list[tuple[str, list[Any]]] = [("state_call", [DYNAMIC_INFO, "0x"])]
    calls += [
        ("state_call", ["NeuronInfoRuntimeApi_get_neurons_lite", neurons_lite_params(n)])
        for n in NETUIDS
    ]
    calls += [("state_getStorage", [f"{SUBTENSOR}{i:032x}"]) for i in (1, 2, 3)]
    calls.append(("state_getKeysPaged", [SUBTENSOR + "aa", 100]))
    return calls


SYNC = sync_calls()


def _session(ip: str | None, limit: int = 100) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(local_addr=(ip, 0) if ip else None, limit=limit),
        timeout=aiohttp.ClientTimeout(total=30),
    )


async def _read(s: aiohttp.ClientSession, url: str, i: int, method: str, params: Any) -> str:
    doc = {"jsonrpc": "2.0", "id": i, "method": method, "params": params}
    async with s.post(url, json=doc) as r:
        raw = await r.read()
    if r.status != 200 or b'"result"' not in raw[:200]:
        raise ValueError(f"{method}: HTTP {r.status} {raw[:120]!r}")
    return cache_kind(r.headers)


async def _sync(s: aiohttp.ClientSession, url: str, client: int, block: int, t0: float) -> Sync:
    got = await asyncio.gather(
        *(_read(s, url, i, m, p) for i, (m, p) in enumerate(SYNC)), return_exceptions=True
    )
    errors = sum(1 for g in got if isinstance(g, BaseException))
    first = got[0] if isinstance(got[0], str) else "error"
    return Sync(block, client, t0, time.monotonic() - t0, errors, first)


async def _heads(ws: aiohttp.ClientWebSocketResponse) -> Any:
    """Subscribe on ``ws``; yields each new head's number."""
    await ws.send_json({"jsonrpc": "2.0", "id": 1, "method": "chain_subscribeNewHeads"})
    async for msg in ws:
        if msg.type != aiohttp.WSMsgType.TEXT:
            break
        doc = msg.json()
        if doc.get("method") == "chain_newHead":
            n = block_number(doc["params"]["result"])
            if n is not None:
                yield n


async def _subscriber(http: str, ws_url: str, ip: str, idx: int, out: list[Sync]) -> None:
    async with _session(ip) as s, s.ws_connect(ws_url) as ws:
        last = -1
        async for n in _heads(ws):  # a sync ends well within a block: one at a time
            if n > last:
                last = n
                out.append(await _sync(s, http, idx, n, time.monotonic()))


async def _poller(http: str, ip: str, idx: int, out: list[Sync]) -> None:
    async with _session(ip) as s:
        await asyncio.sleep(idx * POLL_S / CLIENTS)  # phases spread over the period
        last, slot = -1, time.monotonic()
        while True:
            doc = {"jsonrpc": "2.0", "id": 0, "method": "chain_getHeader", "params": []}
            try:
                async with s.post(http, json=doc) as r:
                    n = block_number((await r.json(content_type=None)).get("result"))
            except (aiohttp.ClientError, TimeoutError, ValueError):
                n = None
            if n is not None and n > last:
                last = n
                out.append(await _sync(s, http, idx, n, time.monotonic()))
            slot += POLL_S
            await asyncio.sleep(max(0.0, slot - time.monotonic()))


async def _node_reads(nodes: list[str], since: float, until: float) -> dict[str, int]:
    async with _session(None) as s:
        out = dict.fromkeys(READ_METHODS, 0)
        for url in nodes:
            # from a second before: a log that dropped entries (it keeps 20,000;
            # a run sends these nodes a few thousand) should still reach back
            # past ``since``; if it does not, the count may be short: said so
            async with s.get(f"{url}/_sim/arrivals", params={"since": str(since - 1)}) as r:
                doc = await r.json()
            kept = doc["arrivals"]
            if doc["dropped"] and (not kept or kept[0]["t"] > since):
                print(f"  (17: {url}'s arrival log may have dropped part of the window)")
            for m, n in proxy_reads(doc["arrivals"], since, until).items():
                out[m] += n
        return out


def cpu_seconds(pid: int) -> float:
    """utime+stime of process ``pid``."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _ended_after(phase: Phase, block: int) -> bool:
    """A sync of a block after ``block`` has ended."""
    return any(s.block > block for s in phase.syncs)


def _unsynced(phase: Phase) -> list[int]:
    """The measured blocks no sync has ended for yet."""
    done = {s.block for s in phase.syncs}
    return [b for b in phase.measured if b not in done]


async def run_phase(
    proxy: str,
    pid: int,
    nodes: list[str],
    trigger: str,
    blocks: int,
    net: int,
    block_s: float = BLOCK_S,
) -> Phase:
    """``WARM + blocks`` blocks of the fleet on ``proxy`` (process ``pid``;
    ``net``: the third byte of the clients' addresses; ``block_s``: the nodes'
    block time)."""
    http, ws_url = f"{proxy}/rpc/v1/finney", f"{proxy.replace('http', 'ws', 1)}/rpc/v1/finney"
    phase = Phase()
    ips = [f"127.0.{net}.{i + 2}" for i in range(CLIENTS)]
    tasks = [
        asyncio.ensure_future(
            _subscriber(http, ws_url, ip, i, phase.syncs)
            if trigger == "subscription"
            else _poller(http, ip, i, phase.syncs)
        )
        for i, ip in enumerate(ips)
    ]
    try:
        async with _session(f"127.0.{net}.1") as s, s.ws_connect(ws_url) as ws:
            seen, since, cpu = [], 0.0, 0.0
            async for n in _heads(ws):
                if seen and n <= seen[-1]:
                    continue
                seen.append(n)
                if len(seen) == WARM:  # mid-block, before the first measured one
                    await asyncio.sleep(block_s / 2)
                    since, cpu = time.time(), cpu_seconds(pid)
                elif len(seen) == WARM + blocks:
                    await asyncio.sleep(block_s / 2)
                    phase.proxy_cpu_s = cpu_seconds(pid) - cpu
                    phase.upstream = await _node_reads(nodes, since, time.time())
                    phase.measured = seen[WARM:]
                    break
        # a measured block none of whose syncs has ended yet has no first client:
        # let one end (bounded) before the clients stop. A smoke run (two test
        # suites side by side have stretched its syncs past 4 s, 0 ended) waits
        # up to 30 s, and only until a sync of a block at or after it ended.
        smoke = block_s == SMOKE_BLOCK_S
        deadline = time.monotonic() + (30.0 if smoke else 4 * block_s)
        while _unsynced(phase) and time.monotonic() < deadline:
            if smoke and phase.measured and _ended_after(phase, phase.measured[-1]):
                break
            await asyncio.sleep(0.05)
        if phase.measured and smoke and _unsynced(phase) == phase.measured:
            # a smoke run's 1 s blocks on a loaded machine: every poller may have
            # skipped the one measured block (their syncs took longer); nothing
            # timed is read there, so the next block a sync ended for stands in
            later = sorted({s.block for s in phase.syncs if s.block > phase.measured[-1]})
            phase.measured = later[: len(phase.measured)] or phase.measured
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return phase


class ValidatorFleet:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.nodes: list[Node] = []
        self.targets: dict[str, str] = {}
        self.pids: dict[str, int] = {}
        self.sidecar = ""
        self.block_s = SMOKE_BLOCK_S if ctx.p.smoke else BLOCK_S

    def start(self) -> None:
        st, ctx = self.ctx.stack, self.ctx
        epoch = time.time() - 3600
        self.nodes = [
            st.start_node(f"vf-{c}", epoch=epoch, block_time=self.block_s, wait=False)
            for c in "abc"
        ]
        # a smoke run's blocks are short: answers not slowed per MiB, so a sync
        # still ends within its block on a busy machine
        per_mib = 0.0 if ctx.p.smoke else PER_MIB_MS
        for n in self.nodes:
            wait_http(f"{n.url}/_sim/state", n.proc)
            n.control(latency_ms=NODE_LATENCY_MS, latency_per_mib_ms=per_mib, byte_slots=BYTE_SLOTS)
        base, self.sidecar = st.write_config(
            "vf-on", [n.url for n in self.nodes], data_dir=ctx.tmp / "vf-on"
        )
        self._edit(base, base, wss=True)
        off = self._edit(base, base.with_name("vf-off.yaml"), prewarm={"max_reads": 0})
        started = st.start_sidecar_and_proxies(
            ("sidecar-vf", base, self.sidecar),
            [("vf-on", base), ("vf-off", off)],
            cpus=ctx.proxy_cpus,
        )
        for name, (proc, url) in zip(PREWARM, started, strict=True):
            self.targets[name], self.pids[name] = url, proc.pid
        ctx.wait_routes(self.sidecar, 3)

    def _edit(self, src: Path, dst: Path, *, wss: bool = False, **proxy: Any) -> Path:
        doc = yaml.safe_load(src.read_text())
        if wss:  # each node also as a node-wss endpoint (same port, ws://)
            eps = doc["registry"]["endpoints"]
            eps += [{**e, "url": "ws" + e["url"][4:], "kind": "node-wss"} for e in eps]
        doc["proxy"].update(proxy)
        doc["data_dir"] = str(self.ctx.tmp / dst.stem)
        dst.write_text(yaml.safe_dump(doc))
        return dst

    def run(self) -> None:
        p = self.ctx.p
        rounds, blocks = (1, 1) if p.smoke else (1, 4) if p.stats_quick else (2, 6)
        variants = [(t, w) for t in TRIGGERS for w in PREWARM]
        print(
            f"\n[17] validator fleet: {CLIENTS} clients, a block every {self.block_s:.0f} s,"
            f" {rounds} x {WARM}+{blocks} blocks per variant",
            flush=True,
        )
        before = sidecar_metric(self.sidecar, "chainproxy_prewarm_total")
        phases: dict[tuple[str, str], list[Phase]] = {v: [] for v in variants}
        urls = [n.url for n in self.nodes]
        net = 90
        for r in range(rounds):
            k = r % len(variants)
            for trig, warm in [*variants[k:], *variants[:k]]:
                net += 1
                phase = asyncio.run(
                    run_phase(
                        self.targets[warm], self.pids[warm], urls, trig, blocks, net, self.block_s
                    )
                )
                phases[trig, warm].append(phase)
                print(f"  17. {trig}, pre-warm {warm}: {summarise([phase])}", flush=True)
        self.ctx.pause(3, 0.5)  # the proxy's next usage batch carries its counters
        after = sidecar_metric(self.sidecar, "chainproxy_prewarm_total")
        prewarm = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in OUTCOMES}
        runs = {v: summarise(ps) for v, ps in phases.items()}
        v = verdict(runs, len(SYNC))
        self._report(runs, v, prewarm)
        self.ctx.report.data["validator_fleet"] = {
            "runs": {f"{t}/{w}": x for (t, w), x in runs.items()},
            "prewarm_total": prewarm,
            "verdict": v,
        }

    def _report(
        self, runs: dict[tuple[str, str], Any], v: dict[str, Any], prewarm: dict[str, float]
    ) -> None:
        r = self.ctx.report

        def line(x: dict[str, Any]) -> str:
            k = x["first_read"]
            return (
                f"first client p50 {f0(x['first_p50_ms'])} ms, p99 {f0(x['first_p99_ms'])} ms"
                f" (heavy read: {k['hit']} hit, {k['joined']} joined, {k['miss']} miss);"
                f" all clients p50 {f0(x['all_p50_ms'])} / p99 {f0(x['all_p99_ms'])} ms;"
                f" {f2(x['upstream_per_block'])} upstream reads per block;"
                f" proxy CPU {f0(x['proxy_cpu_ms_per_block'])} ms per block;"
                f" {x['errors']} errors of {x['syncs']} syncs; {x['blocks']} blocks"
            )

        for trig in TRIGGERS:
            r.row(
                f"17. {CLIENTS} validators ({trig}): first client's sync, pre-warm on vs off",
                "off: " + line(runs[trig, "off"]),
                "on: " + line(runs[trig, "on"]),
                f2(v[trig]["first_p50_ratio"]),
            )
        outcomes = ", ".join(f"{k} {prewarm[k]:.0f}" for k in OUTCOMES)
        r.row("17. chainproxy_prewarm_total (sidecar /metrics)", "", outcomes, "")
        r.goal(
            "Validator fleet, pre-warm on: the first client's heavy read warm at "
            + "; ".join(
                f"{t} {v[t]['warm_share']:.0%} of blocks, {f2(runs[t, 'on']['upstream_per_block'])}"
                f" upstream reads per block for {len(SYNC)} reads"
                f" ({'met' if v[t]['goal_met'] else 'NOT met'})"
                for t in TRIGGERS
            )
            + " (goal: every block, <= 1 upstream call per read); first client p50 on/off "
            + ", ".join(f"{t} {f2(v[t]['first_p50_ratio'])}" for t in TRIGGERS)
        )
