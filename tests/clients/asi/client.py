"""Run by tests/clients/test_async_substrate_interface.py with the Python of its
own venv (``.venv-asi``: ``async-substrate-interface``, the bittensor SDK's
WebSocket client, whose ``scalecodec`` cannot share a venv with
``substrate-interface``'s). Sends reads, a batch, a refused write and a
subscription through the proxy on one socket; prints one JSON line.

    python client.py WS_URL SOURCE_IP
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
import types
from typing import Any

import async_substrate_interface.async_substrate as asi
from async_substrate_interface.async_substrate import Websocket


def bind_source(ip: str) -> None:
    """The client makes its own TCP socket: have it leave from ``ip`` (the test's
    own rate-limit identity)."""

    class Bound(socket.socket):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            if self.family == socket.AF_INET:
                self.bind((ip, 0))

    shim = types.ModuleType("socket")
    shim.__dict__.update(socket.__dict__)
    shim.socket = Bound  # type: ignore[attr-defined]
    asi.socket = shim  # type: ignore[attr-defined]


async def main(url: str) -> dict[str, Any]:
    """The SDK client's own WebSocket manager (string ids, many calls in flight,
    batches). Its high-level ``AsyncSubstrateInterface`` needs the runtime's
    metadata v15 (``Metadata_metadata_at_version``), which the offline
    chopsticks runtime does not export, so it is not driven here."""

    def call(method: str, params: list[Any] | None = None) -> dict[str, Any]:
        return {"jsonrpc": "2.0", "method": method, "params": params or []}

    ws = Websocket(url, shutdown_timer=None)
    ids: dict[str, Any] = {}
    async with ws:
        ids["chain"] = await ws.send(call("system_chain"))
        for n in range(4):
            ids[f"hash{n}"] = await ws.send(call("chain_getBlockHash", [n]))
        ids["head"] = await ws.send(call("chain_getHeader"))
        ids["version"] = await ws.send(call("state_getRuntimeVersion"))
        ids["write"] = await ws.send(call("author_submitExtrinsic", ["0x00"]))
        ids["subscribe"] = await ws.send(call("chain_subscribeNewHeads"))
        batch = await ws.send_batch([call("system_name"), call("chain_getBlockHash", [1])])
        ids["batch0"], ids["batch1"] = batch
        out: dict[str, Any] = {"ids": {k: str(v) for k, v in ids.items()}}
        pending = dict(ids)
        for _ in range(3000):
            for key, item in list(pending.items()):
                got = await ws.retrieve(item)
                if got is not None:
                    out[key] = got
                    del pending[key]
            if not pending:
                break
            await asyncio.sleep(0.01)
        out["missing"] = sorted(pending)
    await ws.shutdown()
    return out


if __name__ == "__main__":
    bind_source(sys.argv[2])
    result = asyncio.run(asyncio.wait_for(main(sys.argv[1]), 120))
    print("ASIJSON " + json.dumps(result, default=str), flush=True)
