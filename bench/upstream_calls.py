"""Scenario 11 (head pinning, coalescing and hedging): fewer upstream calls and a
shorter tail, against baselines measured in the same run on the same three
simulated nodes:

* ``bare mitmdump`` reverse-proxying to one node (every client call is one
  upstream call: what a plain proxy does);
* ``chainproxy, features off`` (``coalesce``, ``head_pinning``, ``hedge``
  disabled; the edge cache on, as always);
* ``chainproxy`` with the defaults.

(a) validator sync: ``VALIDATORS`` clients, right after each of ``BLOCKS`` new
blocks, each run a metagraph-like sequence (head, three runtime-API
``state_call``s, two storage reads, a keys page), all without a block hash;
upstream calls are the nodes' own per-method counters (minus what the
sidecar's probes sent in an idle window of the same length) ÷ client calls.
(b) stall: every node stalls 2 s on 1 request in 20; distinct storage reads
(nothing to share or cache) at concurrency 8: client p50/p99 with hedging on
and off.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from bench.context import Context
from bench.report import f0, f2
from bench.stack import Node
from chainproxy.supervisor import wait_http, wait_port

VALIDATORS = 10
BLOCK_S = 3.0
SYNC = [
    ("chain_getHeader", []),
    ("state_call", ["SubnetInfoRuntimeApi_get_subnets_info", "0x"]),
    ("state_call", ["NeuronInfoRuntimeApi_get_neurons_lite", "0x0100"]),
    ("state_call", ["SubnetInfoRuntimeApi_get_subnet_hyperparams", "0x0100"]),
    ("state_getStorage", ["0x658faa385070e074c85bf6b568cf0555"]),
    ("state_getStorage", ["0x658faa385070e074c85bf6b568cf05550100"]),
    ("state_getKeysPaged", ["0x658faa385070e074c85bf6b568cf0555", 100]),
]
METHODS = {m for m, _ in SYNC}
OFF = {
    "coalesce": {"enabled": False},
    "head_pinning": {"enabled": False},
    "hedge": {"enabled": False},
}


def _pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


class UpstreamCalls:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.nodes: list[Node] = []
        self.targets: dict[str, str] = {}

    def start(self) -> None:
        st, ctx = self.ctx.stack, self.ctx
        epoch = time.time() - 3600
        self.nodes = [
            st.start_node(f"uc-{c}", epoch=epoch, wait=False, block_time=BLOCK_S) for c in "abc"
        ]
        for n in self.nodes:
            wait_http(f"{n.url}/_sim/state", n.proc)
        top = {"probe": {"interval_s": 30, "head_interval_s": 2, "timeout_s": 2}}
        urls = [n.url for n in self.nodes]
        on, sidecar = st.write_config("uc-on", urls, data_dir=ctx.tmp / "uc-on", top=top)
        off = self._variant(on, "uc-off", OFF)
        no_hedge = self._variant(on, "uc-nohedge", {"hedge": {"enabled": False}})
        bare_proc, bare = st.start_bare_mitmdump(
            "uc-bare", self.nodes[0].url, cpus=ctx.proxy_cpus, wait=False
        )
        variants = (("chainproxy", on), ("features off", off), ("hedging off", no_hedge))
        started = st.start_sidecar_and_proxies(
            ("sidecar-uc", on, sidecar),
            [(f"uc-{name}", cfg) for name, cfg in variants],
            cpus=ctx.proxy_cpus,
        )
        for (name, _), (_, url) in zip(variants, started, strict=True):
            self.targets[name] = url
        wait_port(int(bare.rsplit(":", 1)[1]), bare_proc)
        self.targets["bare mitmdump"] = bare
        ctx.wait_routes(sidecar, 3)

    def _variant(self, base: Path, name: str, proxy: dict[str, Any]) -> Path:
        doc = yaml.safe_load(base.read_text())
        doc["proxy"].update(proxy)
        doc["data_dir"] = str(self.ctx.tmp / name)
        path = base.with_name(f"{name}.yaml")
        path.write_text(yaml.safe_dump(doc))
        return path

    def calls(self, methods: set[str]) -> int:
        total = 0
        for n in self.nodes:
            doc = _state(n.url)
            total += sum(c for m, c in doc["calls"].items() if m in methods)
        return total

    def run(self) -> None:
        print("\n[11] upstream calls: validator sync, stall", flush=True)
        data: dict[str, Any] = {}
        p = self.ctx.p
        blocks = 1 if p.smoke else 2 if p.stats_quick else 5
        sync = {
            name: self._sync(name, blocks)
            for name in ("bare mitmdump", "features off", "chainproxy")
        }
        stall = self._stall(16 if p.smoke else 150 if p.stats_quick else 400)
        self._report(sync, stall, blocks)
        data["sync"], data["stall"] = sync, stall
        self.ctx.report.data["upstream_calls"] = data

    def _sync(self, name: str, blocks: int) -> dict[str, Any]:
        url = (
            self.targets[name] + "/rpc/v1/finney" if name != "bare mitmdump" else self.targets[name]
        )
        smoke = self.ctx.p.smoke
        idle_before = self.calls(METHODS)
        if not smoke:  # (a smoke run's count is not read for what it says)
            time.sleep(BLOCK_S)  # the probes' own share, over one block
        probe_per_block = self.calls(METHODS) - idle_before
        before = self.calls(METHODS)
        latencies, errors = asyncio.run(_validators(url, blocks, paced=not smoke))
        upstream = self.calls(METHODS) - before - probe_per_block * blocks
        client = VALIDATORS * len(SYNC) * blocks
        out = {
            "client_calls": client,
            "upstream_calls": max(0, upstream),
            "p50_ms": _pct(latencies, 0.5) * 1000,
            "p99_ms": _pct(latencies, 0.99) * 1000,
            "errors": errors,
        }
        print(f"  11a. {name}: {out}", flush=True)
        return out

    def _stall(self, n: int) -> dict[str, Any]:
        for node in self.nodes:
            _control(node.url, {"stall_rate": 0.05, "stall_ms": 2000})
        try:
            out = {}
            for name in ("hedging off", "chainproxy"):
                url = self.targets[name] + "/rpc/v1/finney"
                lat, errors, hedged = asyncio.run(_distinct_reads(url, n, name))
                out[name] = {
                    "p50_ms": _pct(lat, 0.5) * 1000,
                    "p99_ms": _pct(lat, 0.99) * 1000,
                    "hedged": hedged,
                    "calls": n,
                    "errors": errors,
                }
                print(f"  11b. {name}: {out[name]}", flush=True)
            return out
        finally:
            for node in self.nodes:
                _control(node.url, {"stall_rate": 0.0})

    def _report(self, sync: dict[str, Any], stall: dict[str, Any], blocks: int) -> None:
        r = self.ctx.report

        def share(x: dict[str, Any]) -> float:
            return x["upstream_calls"] / x["client_calls"]

        def desc(x: dict[str, Any]) -> str:
            return (
                f"{x['upstream_calls']:,}/{x['client_calls']:,} upstream"
                f" ({share(x):.0%}), p50 {f0(x['p50_ms'])} ms, p99 {f0(x['p99_ms'])} ms,"
                f" errors {x['errors']}"
            )

        cp, off, bare = sync["chainproxy"], sync["features off"], sync["bare mitmdump"]
        r.row(
            "11a. validator sync, upstream ÷ client calls",
            "features off " + desc(off),
            "chainproxy " + desc(cp),
            f2(share(cp)),
        )
        r.row(
            "11a. validator sync vs bare mitmdump",
            "bare mitmdump " + desc(bare),
            "chainproxy",
            f2(share(cp) / max(share(bare), 1e-9)),
        )
        h_on, h_off = stall["chainproxy"], stall["hedging off"]
        r.row(
            "11b. every node stalls 2 s on 1 request in 20: client p99",
            f"hedging off p50 {f0(h_off['p50_ms'])} ms, p99 {f0(h_off['p99_ms'])} ms",
            f"hedging on p50 {f0(h_on['p50_ms'])} ms, p99 {f0(h_on['p99_ms'])} ms,"
            f" hedged {h_on['hedged']}/{h_on['calls']}",
            f2(h_on["p99_ms"] / h_off["p99_ms"]),
        )
        r.goal(
            f"Validator sync ({VALIDATORS} validators x {blocks} blocks x {len(SYNC)} calls, no"
            f" block hash): upstream calls {share(cp):.0%} of client calls with chainproxy"
            f" (goal <= 20 %), {share(off):.0%} with the features off, {share(bare):.0%} through"
            f" bare mitmdump; stall p99 {f0(h_on['p99_ms'])} ms with hedging vs"
            f" {f0(h_off['p99_ms'])} ms without (goal < 1000 ms); hedges"
            f" {h_on['hedged'] / h_on['calls']:.1%} of calls (budget 10 %)"
        )


def _state(url: str) -> Any:
    """A node's /_sim/state (the standard library: no event loop here)."""
    from urllib.request import urlopen

    with urlopen(f"{url}/_sim/state", timeout=5) as r:
        return json.loads(r.read())


def _control(url: str, faults: dict[str, Any]) -> None:
    from urllib.request import Request, urlopen

    req = Request(f"{url}/_sim/control", data=json.dumps(faults).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    with urlopen(req, timeout=5) as r:
        r.read()


async def _validators(url: str, blocks: int, paced: bool = True) -> tuple[list[float], int]:
    """``VALIDATORS`` syncs at each of ``blocks`` blocks, one block apart
    (``paced=False``: back to back)."""
    latencies: list[float] = []
    errors = 0
    async with aiohttp.ClientSession() as s:

        async def one(method: str, params: list[Any], i: int) -> None:
            nonlocal errors
            t0 = time.perf_counter()
            doc = {"jsonrpc": "2.0", "id": i, "method": method, "params": params}
            async with s.post(url, json=doc) as r:
                body = await r.json(content_type=None)
            latencies.append(time.perf_counter() - t0)
            if r.status != 200 or "result" not in body:
                errors += 1

        async def validator(v: int) -> None:
            for i, (method, params) in enumerate(SYNC):
                await one(method, params, v * 100 + i)

        for _ in range(blocks):
            started = time.monotonic()
            await asyncio.gather(*(validator(v) for v in range(VALIDATORS)))
            if paced:
                await asyncio.sleep(max(0.0, BLOCK_S - (time.monotonic() - started)))
    return latencies, errors


async def _distinct_reads(url: str, n: int, tag: str) -> tuple[list[float], int, int]:
    latencies: list[float] = []
    errors = hedged = 0
    queue = list(range(n))
    async with aiohttp.ClientSession() as s:

        async def worker() -> None:
            nonlocal errors, hedged
            while queue:
                i = queue.pop()
                key = "0x" + f"{tag}-{i}-{time.time_ns()}".encode().hex()
                doc = {"jsonrpc": "2.0", "id": i, "method": "state_getStorage", "params": [key]}
                t0 = time.perf_counter()
                async with s.post(url, json=doc) as r:
                    body = await r.json(content_type=None)
                    hedged += r.headers.get("X-Chainproxy-Hedged") == "1"
                latencies.append(time.perf_counter() - t0)
                if r.status != 200 or "result" not in body:
                    errors += 1

        await asyncio.gather(*(worker() for _ in range(8)))
    return latencies, errors, hedged
