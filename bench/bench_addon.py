"""The addon's own CPU per request, without mitmproxy's event dispatch and the
network: every chainproxy stage's ``request`` hook run in order on prepared
mitmproxy flows, the upstream a fake transport that answers at once (miss
path), or the answer already in the on-disk edge cache (hit path).

    python bench/bench_addon.py [--quick] [--json] [--costs]

This is the part of the per-request cost that chainproxy's code decides; the
end-to-end runner (``bench/run.py``) measures the rest. Prints µs per request
(median of several rounds). ``--costs`` (scenario 13): the hit path with the
quota's unit costs on and off (``proxy.rate_limit.costs.enabled``), whole and
its two quota steps alone (``rate_limit`` + ``charge_bytes`` run on a captured
call, a loop doing only the reset subtracted), alternating rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson
from mitmproxy.test import tflow

from addon.addons import build_addons
from addon.cache.store import DiskCacheStore
from addon.hooks.pipeline import RpcPipeline
from addon.hooks.settings import Settings
from addon.runtime import Runtime
from addon.steps.charge_bytes import charge_bytes
from addon.steps.rate_limit import rate_limit
from bench.results import print_results
from common.config import parse_config

UPSTREAM = "http://127.0.0.1:9"
HEADER = {
    "parentHash": "0xae6183c6d23ad524b78c13bf160e1e6847e9be0276167546a1f3ef07f905ead5",
    "number": "0x3d0900",
    "stateRoot": "0x7fdcfda43cb7d6478d67d5975aa02ce01b5278c370787c9dcafdcdc3e878c1f0",
    "extrinsicsRoot": "0x01e225103209aff1b48663cde8f6f90a2c6e242be9a8fa0eeb61f67d34816ee9",
    "digest": {"logs": []},
}
PINNED = "0x" + "ab" * 32
STORAGE_VALUE = "0x" + "01" * 80  # an AccountInfo-sized value


class InstantUpstream:
    """Answers at once: a storage read with a value (a hex string, as a node
    answers one), anything else with a block header, as the trivial upstream does."""

    async def post(self, url: str, body: bytes, timeout: float) -> tuple[int, bytes]:
        # orjson: making a node's answer is not the proxy's work (the stdlib's json
        # here put ~12 µs of the fake's own into each miss's figure)
        doc = orjson.loads(body)
        result = STORAGE_VALUE if doc["method"] == "state_getStorage" else HEADER
        return 200, orjson.dumps({"jsonrpc": "2.0", "id": doc["id"], "result": result})


def _stages(tmp: Path, costs: bool = True) -> tuple[list[Any], Runtime]:
    config = parse_config(
        {
            "proxy": {
                "networks": ["finney"],
                "rate_limit": {
                    "requests": 1_000_000_000,
                    "window_s": 60,
                    "costs": {"enabled": costs},
                },
            },
            "data_dir": str(tmp),
            "registry": {
                "endpoints": [
                    {"url": UPSTREAM, "provider": "p", "kind": "node-rpc", "network": "finney"}
                ]
            },
        },
        env={},
    )
    addons = build_addons()
    settings = next(a for a in addons if isinstance(a, Settings))
    rt = Runtime.build(config)
    rt.cache = DiskCacheStore(tmp / "cache", size_limit_mb=64)
    rt.transport = InstantUpstream()
    settings.holder.runtime = rt
    return [a for a in addons if not isinstance(a, Settings)], rt


def _flows(n: int, body: bytes) -> list[Any]:
    out = []
    for i in range(n):
        f = tflow.tflow()
        f.request.method = "POST"
        f.request.path = "/rpc/v1/finney"
        f.request.headers["content-type"] = "application/json"
        f.request.content = body
        f.client_conn.peername = (f"127.0.{i % 200}.{i % 250 + 1}", 40000)
        out.append(f)
    return out


async def _run(stages: list[Any], flows: list[Any]) -> float:
    hooks = [s.request for s in stages if hasattr(s, "request")]
    gc.collect()
    start = time.process_time()
    for f in flows:
        for hook in hooks:
            r = hook(f)
            if r is not None:
                await r
    elapsed = time.process_time() - start
    assert flows[-1].response is not None and flows[-1].response.status_code == 200
    return elapsed / len(flows) * 1e6


# (calls per round, rounds) of the main measure and of --costs, by size
SIZES = {"full": (5000, 9), "quick": (1000, 3), "smoke": (100, 1)}
COSTS = {"full": (2000, 7, 50_000), "quick": (1000, 5, 20_000), "smoke": (100, 1, 1000)}


async def main_async(size: str) -> dict[str, float]:
    n, rounds = SIZES[size]
    miss_body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "chain_getHeader", "params": []}
    ).encode()
    hit_body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "chain_getHeader", "params": [PINNED]}
    ).encode()
    with tempfile.TemporaryDirectory(prefix="bench-addon-") as tmp:
        stages, _rt = _stages(Path(tmp))
        await _run(stages, _flows(200, hit_body))  # fills the cache entry, warms up
        results: dict[str, list[float]] = {"miss": [], "hit": []}
        for _ in range(rounds):
            results["miss"].append(await _run(stages, _flows(n, miss_body)))
            results["hit"].append(await _run(stages, _flows(n, hit_body)))
            last = _flows(1, hit_body)
            await _run(stages, last)
            assert last[0].response.headers["X-Cache"] == "HIT"
    return {k: statistics.median(v) for k, v in results.items()}


async def _captured_call(stages: list[Any], body: bytes) -> Any:
    """The hit call's context as the quota step saw it (its answers still empty)."""
    pipe = next(s for s in stages if isinstance(s, RpcPipeline))
    seen: list[Any] = []

    def grab(rpc: Any, rt: Runtime) -> Any:
        seen.append(rpc)
        return rate_limit(rpc, rt)

    saved = pipe.steps
    pipe.steps = tuple(grab if step is rate_limit else step for step in saved)
    try:
        await _run(stages, _flows(1, body))
    finally:
        pipe.steps = saved
    return seen[0]


def _quota_steps(rpc: Any, rt: Runtime, n: int) -> float:
    """µs CPU of ``rate_limit`` + ``charge_bytes`` on one call (the reset of its
    answers between runs subtracted)."""
    answers = rpc.answers
    gc.collect()
    t0 = time.process_time()
    for _ in range(n):
        answers[0] = None
        rpc.rate = None
    t1 = time.process_time()
    for _ in range(n):
        answers[0] = None
        rpc.rate = None
        rate_limit(rpc, rt)
        charge_bytes(rpc, rt)
    t2 = time.process_time()
    assert rpc.rate is not None and rpc.rate.allowed
    return ((t2 - t1) - (t1 - t0)) / n * 1e6


async def costs_async(size: str) -> dict[str, float]:
    """The hit path and its quota steps with the unit costs on and off."""
    n, rounds, steps_n = COSTS[size]
    hit_body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "chain_getHeader", "params": [PINNED]}
    ).encode()
    out: dict[str, list[float]] = {k: [] for k in ("hit_on", "hit_off", "steps_on", "steps_off")}
    with tempfile.TemporaryDirectory(prefix="bench-addon-costs-") as tmp:
        sides = {}
        for side, enabled in (("on", True), ("off", False)):
            stages, rt = _stages(Path(tmp) / side, costs=enabled)
            await _run(stages, _flows(200, hit_body))  # fills the cache entry, warms up
            sides[side] = (stages, rt, await _captured_call(stages, hit_body))
        for r in range(rounds):
            for side in ("on", "off") if r % 2 == 0 else ("off", "on"):
                stages, rt, rpc = sides[side]
                out[f"hit_{side}"].append(await _run(stages, _flows(n, hit_body)))
                out[f"steps_{side}"].append(_quota_steps(rpc, rt, steps_n))
    return {k: statistics.median(v) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="the smallest size: does it run")
    ap.add_argument("--json", action="store_true", help="one JSON line instead of text")
    ap.add_argument("--costs", action="store_true", help="unit costs on vs off, hit path")
    args = ap.parse_args()
    size = "smoke" if args.smoke else "quick" if args.quick else "full"
    if args.costs:
        res = asyncio.run(costs_async(size))
        print_results(res, args.json, lambda k, v: f"{k}: {v:.2f} µs CPU per request")
        return
    res = asyncio.run(main_async(size))
    print_results(
        res, args.json, lambda k, v: f"addon stages, {k} path: {v:.0f} µs CPU per request"
    )


if __name__ == "__main__":
    main()
