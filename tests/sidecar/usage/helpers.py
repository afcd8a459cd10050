"""What the usage tests share: the time they run at, rollups and batches for
the store, and the app with its config, a client and the usage read over HTTP."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from common.config import Config, parse_config
from common.usage_wire import Rollup
from sidecar.server.app import create_app
from sidecar.usage.stats.batch import Batch
from tests.fakes import FakeClock
from tests.sidecar.helpers import fake_factory

NOW = 1_763_700_000.0
MINUTE = int(NOW // 60)
URL = "/api/v1/internal/usage"
EP_A = "endpoint-srf-" + "a" * 16


def batch(*rollups: Rollup, batch_id: str | None = None) -> Batch:
    return Batch(batch_id or uuid.uuid4().hex, NOW, tuple(rollups))


def r(
    minute: int = MINUTE,
    n: int = 1,
    *,
    network: str = "finney",
    endpoint: str | None = EP_A,
    method: str = "chain_getHeader",
    errors: int = 0,
    bucket: int = 250,
    units: int = 0,
) -> Rollup:
    return Rollup(minute, network, endpoint, method, n, errors, 0, 0, n * 100.0, {bucket: n}, units)


def usage_config(tmp: Path, token: str | None = None) -> Config:
    def ep(port: int, provider: str, network: str = "finney", **kw: Any) -> dict[str, Any]:
        return {
            "url": f"http://127.0.0.1:{port}",
            "provider": provider,
            "kind": "node-rpc",
            "network": network,
            **kw,
        }

    return parse_config(
        {
            "sidecar": {"token": token},
            "data_dir": str(tmp),
            "registry": {
                "endpoints": [
                    ep(1, "opentensor"),
                    ep(2, "opentensor", archive=True),
                    ep(3, "onfinality"),
                    ep(4, "onfinality"),
                    ep(5, "opentensor", "test"),
                    {**ep(6, "opentensor"), "url": "ws://127.0.0.1:6", "kind": "node-wss"},
                ]
            },
        },
        env={},
    )


async def usage_client(aiohttp_client: Any, config: Config, clock: FakeClock, **kw: Any) -> Any:
    app = create_app(config, probing=False, probe_factory=fake_factory({}), clock=clock, **kw)
    return await aiohttp_client(app)


def wire_batch(rollups: list[dict[str, Any]], batch_id: str | None = None) -> dict[str, Any]:
    return {"batch_id": batch_id or uuid.uuid4().hex, "sent_at": NOW, "rollups": rollups}


async def get_usage(client: Any, query: str = "") -> dict[str, Any]:
    r = await client.get("/api/v1/usage" + query)
    assert r.status == 200, await r.text()
    return await r.json()
