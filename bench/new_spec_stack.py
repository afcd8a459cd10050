"""What scenarios 19 and 20 (``bench_follow_fanout.py``,
``bench_chain_head_storage.py``) share: chainproxy (mitmdump + addon, no
sidecar, as scenario 9 runs it) in front of one node registered as both
``node-rpc`` and ``node-wss``; client sockets from loopback addresses of their
own; percentiles."""

from __future__ import annotations

import asyncio
import statistics
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from chainproxy.commands import proxy_argv
from chainproxy.supervisor import Child, Supervisor, free_port, wait_http

BIN = Path(sys.executable).parent


@dataclass
class Proxy:
    child: Child
    port: int

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/rpc/v1/finney"


def proxy_config(tmp: Path, node_url: str, proxy: dict[str, Any]) -> dict[str, Any]:
    """A config for one network, ``finney``, on one node (``node_url``:
    ``http://…``, also its ``ws://`` twin); ``proxy``: the ``proxy`` section's
    keys beside the network and a rate limit no bench reaches."""
    sidecar_port = free_port()  # nothing listens: the proxy runs on its static config
    endpoint = {"provider": "n", "network": "finney"}
    ws_url = node_url.replace("http://", "ws://")
    return {
        "proxy": {
            "networks": ["finney"],
            "rate_limit": {"requests": 1_000_000, "window_s": 60},
            **proxy,
        },
        "sidecar": {"url": f"http://127.0.0.1:{sidecar_port}", "port": sidecar_port},
        "data_dir": str(tmp / "data"),
        "registry": {
            "endpoints": [
                {"url": node_url, "kind": "node-rpc", **endpoint},
                {"url": ws_url, "kind": "node-wss", **endpoint},
            ]
        },
    }


async def start_proxy(sup: Supervisor, tmp: Path, config: dict[str, Any]) -> Proxy:
    (tmp / "config.yaml").write_text(yaml.safe_dump(config))
    port = free_port()
    argv = proxy_argv(
        BIN / "mitmdump", tmp / "config.yaml", config["sidecar"]["url"], port=port, quiet=True
    )
    child = sup.start("mitmdump", argv)
    await asyncio.to_thread(wait_http, f"http://127.0.0.1:{port}/rpc/", child)
    return Proxy(child, port)


def client_ips(n: int, block: int) -> list[str]:
    """``n`` loopback source addresses, one client each, in ``127.<block>.x.y``
    (a block per phase: a closed socket's address is not reused at once)."""
    return [f"127.{block}.{i // 250}.{2 + i % 250}" for i in range(n)]


@asynccontextmanager
async def sockets(url: str, ips: list[str]) -> AsyncIterator[list[aiohttp.ClientWebSocketResponse]]:
    """One WebSocket to ``url`` from each address, closed at the end."""
    sessions = [
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(ip, 0))) for ip in ips
    ]
    try:
        yield [await s.ws_connect(url, max_msg_size=0) for s in sessions]
    finally:
        for s in sessions:
            await s.close()


def q(xs: list[float], p: float) -> float:
    """The ``p``-th percentile (1-99) of ``xs``, as scenario 9 takes it."""
    if not xs:
        return float("nan")
    return statistics.quantiles(xs, n=100)[int(p) - 1] if len(xs) > 1 else xs[0]
