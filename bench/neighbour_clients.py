"""Scenario 13's clients, one kind per process: the light clients in one
``python bench/neighbour_clients.py light …`` and the heavy ones in another,
each with an event loop of its own, so the heavy clients' reading of their
1 MiB answers never delays a light client's timer or its reading (they shared
one loop in the runner before 2026-11-28). Prints one ``BENCHJSON`` line: the
``Tally`` of its clients.

    python bench/neighbour_clients.py light|heavy URL RUN TAG SECONDS
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results import print_results

LIGHT, HEAVY, HEAVY_WORKERS = 20, 5, 3
LIGHT_PERIOD_S = 1.0
METAGRAPHS = "SubnetInfoRuntimeApi_get_all_metagraphs"
STORAGE = "0x658faa385070e074c85bf6b568cf0555"
KEYS = "0x26aa394eea5630e07c48ae0c9558cef7"


@dataclass
class Tally:
    """What the clients of one run saw."""

    light: list[float] = field(default_factory=list)  # seconds, each light call answered
    light_errors: int = 0
    heavy_ok: int = 0
    heavy_429: int = 0
    heavy_errors: int = 0
    heavy_503: int = 0  # shed: upstream_capacity, the client waits its Retry-After
    heavy_hedged: int = 0  # heavy answers a second node raced for (X-Chainproxy-Hedged)


def merge(tallies: list[Tally]) -> Tally:
    """The tallies of one run's client processes as one."""
    out = Tally()
    for t in tallies:
        out.light += t.light
        for k in ("light_errors", "heavy_ok", "heavy_429", "heavy_errors", "heavy_503"):
            setattr(out, k, getattr(out, k) + getattr(t, k))
        out.heavy_hedged += t.heavy_hedged
    return out


def storage_key(client: int, round_: int, k: int, tag: int) -> str:
    """A light client's own storage key of one round (never a cache hit)."""
    return f"{STORAGE}{tag:02x}{client:04x}{round_:08x}{k:02x}"


def heavy_call(client: int, i: int, tag: int) -> dict[str, Any]:
    """The heavy client's i-th call: params of its own, so never a cache hit."""
    own = f"{tag:02x}{client:02x}{i:08x}"
    if i % 2 == 0:
        return {"method": "state_call", "params": [METAGRAPHS, "0x" + own]}
    return {"method": "state_getKeysPaged", "params": [KEYS + own, 1000]}


def client_ips(run: int) -> tuple[list[str], list[str]]:
    """Light and heavy clients' source addresses for run ``run`` (fresh quotas)."""
    third = 60 + run
    return (
        [f"127.0.{third}.{i + 2}" for i in range(LIGHT)],
        [f"127.0.{third}.{i + 100}" for i in range(HEAVY)],
    )


def _session(ip: str) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(local_addr=(ip, 0)),
        timeout=aiohttp.ClientTimeout(total=30),
    )


async def _light(url: str, ip: str, idx: int, tag: int, stop_at: float, t: Tally) -> None:
    async with _session(ip) as s:
        await asyncio.sleep(idx * LIGHT_PERIOD_S / LIGHT)  # spread over the period
        slot = time.monotonic()
        for n in itertools.count():
            if time.monotonic() >= stop_at:
                return
            calls = [("chain_getHeader", [])] + [
                ("state_getStorage", [storage_key(idx, n, k, tag)]) for k in range(3)
            ]
            for i, (method, params) in enumerate(calls):
                doc = {"jsonrpc": "2.0", "id": i, "method": method, "params": params}
                t0 = time.perf_counter()
                try:
                    async with s.post(url, json=doc) as r:
                        body = await r.json(content_type=None)
                    t.light.append(time.perf_counter() - t0)
                    if r.status != 200 or "result" not in body:
                        t.light_errors += 1
                except (aiohttp.ClientError, TimeoutError, ValueError):
                    t.light_errors += 1
            slot += LIGHT_PERIOD_S
            now = time.monotonic()
            if slot < now:  # late: skip the missed slots, keep the phase
                slot += LIGHT_PERIOD_S * (int((now - slot) / LIGHT_PERIOD_S) + 1)
            await asyncio.sleep(slot - now)


async def _heavy(url: str, ip: str, idx: int, tag: int, stop_at: float, t: Tally) -> None:
    counter = itertools.count()
    async with _session(ip) as s:

        async def worker() -> None:
            while time.monotonic() < stop_at:
                i = next(counter)
                doc = {"jsonrpc": "2.0", "id": i, **heavy_call(idx, i, tag)}
                try:
                    async with s.post(url, json=doc) as r:
                        raw = await r.read()
                        retry = r.headers.get("Retry-After")
                        t.heavy_hedged += r.headers.get("X-Chainproxy-Hedged") == "1"
                except (aiohttp.ClientError, TimeoutError):
                    t.heavy_errors += 1
                    continue
                if r.status in (429, 503):
                    if r.status == 429:
                        t.heavy_429 += 1
                    else:
                        t.heavy_503 += 1
                    wait = float(retry) if retry else 1.0
                    await asyncio.sleep(max(0.0, min(wait, stop_at - time.monotonic())))
                elif r.status == 200 and b'"result"' in raw[:200]:
                    t.heavy_ok += 1
                else:
                    t.heavy_errors += 1

        await asyncio.gather(*(worker() for _ in range(HEAVY_WORKERS)))


async def clients(role: str, url: str, run: int, tag: int, seconds: float) -> Tally:
    """One kind of client (``light`` or ``heavy``) for ``seconds``: what they saw."""
    t = Tally()
    stop_at = time.monotonic() + seconds
    light_ips, heavy_ips = client_ips(run)
    if role == "light":
        tasks = [_light(url, ip, i, tag, stop_at, t) for i, ip in enumerate(light_ips)]
    else:
        tasks = [_heavy(url, ip, i, tag, stop_at, t) for i, ip in enumerate(heavy_ips)]
    pending = [asyncio.ensure_future(c) for c in tasks]
    _, late = await asyncio.wait(pending, timeout=seconds + 10)
    for task in late:  # calls still in flight long after the end: not counted
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("role", choices=("light", "heavy"))
    ap.add_argument("url")
    ap.add_argument("run", type=int)
    ap.add_argument("tag", type=int)
    ap.add_argument("seconds", type=float)
    a = ap.parse_args()
    t = asyncio.run(clients(a.role, a.url, a.run, a.tag, a.seconds))
    print_results(asdict(t), True, lambda k, v: f"{k}: {v}")


if __name__ == "__main__":
    main()
