"""Heavy clients of scenario 21: ``--clients`` clients, each pulling a ~1 MiB
``get_all_metagraphs`` answer ``--rate`` times a second (paced; params of its
own every call, so a miss each time), each client its own source address and
keep-alive connection. Runs in a process of its own. Prints one ``BENCHJSON``
line: answers, errors, MiB received.

    python bench/big_pull.py --url URL --clients 4 --rate 5 --seconds 10 --tag 1
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results import print_results

METAGRAPHS = "SubnetInfoRuntimeApi_get_all_metagraphs"


async def _client(
    url: str, idx: int, tag: int, rate: float, stop_at: float, out: dict[str, int]
) -> None:
    connector = aiohttp.TCPConnector(local_addr=(f"127.0.9{tag % 10}.{idx + 2}", 0))
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as s:
        slot = time.monotonic() + idx / (rate * 8)  # phases spread
        n = 0
        while slot < stop_at:
            await asyncio.sleep(max(0.0, slot - time.monotonic()))
            n += 1
            params = [METAGRAPHS, f"0x{tag:04x}{idx:02x}{n:08x}"]
            doc = {"jsonrpc": "2.0", "id": n, "method": "state_call", "params": params}
            try:
                async with s.post(url, json=doc) as r:
                    raw = await r.read()
                ok = r.status == 200 and b'"result"' in raw[:100] + raw[-100:]
                out["ok" if ok else "errors"] += 1
                out["bytes"] += len(raw)
            except (aiohttp.ClientError, TimeoutError):
                out["errors"] += 1
            slot += 1 / rate
            if slot < time.monotonic():  # late: skip the missed slots
                slot = time.monotonic()


async def pull(url: str, clients: int, rate: float, seconds: float, tag: int) -> dict[str, int]:
    out = {"ok": 0, "errors": 0, "bytes": 0}
    stop_at = time.monotonic() + seconds
    await asyncio.gather(*(_client(url, i, tag, rate, stop_at, out) for i in range(clients)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--rate", type=float, default=5.0, help="answers a second per client")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--tag", type=int, default=1, help="makes this run's params its own")
    a = ap.parse_args()
    got = asyncio.run(pull(a.url, a.clients, a.rate, a.seconds, a.tag))
    print_results({**got, "mib": got["bytes"] / (1 << 20)}, True, lambda k, v: f"{k}: {v}")


if __name__ == "__main__":
    main()
