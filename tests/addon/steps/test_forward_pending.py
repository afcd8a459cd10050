"""Forwarding in the pipeline: identical calls in flight share one upstream call, and
the clients that joined see it (header, mitmweb annotation, metric)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from tests.addon.helpers import (
    body,
    call,
    make,
    rpc_flow,
    run,
)


async def test_identical_calls_in_flight_share_one_upstream_call() -> None:
    stages, _, rt = make()
    gate = asyncio.Event()

    async def slow(doc: Any) -> tuple[int, bytes]:
        await gate.wait()
        return 200, json.dumps({"jsonrpc": "2.0", "id": doc["id"], "result": "ok"}).encode()

    class Slow:
        seen: list[Any] = []

        async def post(self, url: str, raw: bytes, timeout: float) -> tuple[int, bytes]:
            self.seen.append(raw)
            return await slow(json.loads(raw))

    rt.transport = Slow()
    flows = [rpc_flow(call("system_health", id_=i)) for i in range(10)]
    tasks = [asyncio.ensure_future(run(stages, f)) for f in flows]
    await asyncio.sleep(0.05)
    gate.set()
    await asyncio.gather(*tasks)
    assert len(Slow.seen) == 1
    assert [body(f)["id"] for f in flows] == list(range(10))  # each its own id
    joined = [f for f in flows if f.response.headers.get("X-Chainproxy-Coalesced") == "1"]
    assert len(joined) == 9 and all("COALESCED" in f.comment for f in joined)
    assert rt.metrics._extra[("chainproxy_coalesced_total", (("network", "finney"),))] == 9
