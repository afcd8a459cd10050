"""The sidecar app in-process (aiohttp test client)."""

from __future__ import annotations

from typing import Any

from chainproxy.config import parse_config
from sidecar.app import create_app


def _config() -> Any:
    return parse_config(
        {
            "registry": {
                "endpoints": [
                    {
                        "url": "http://127.0.0.1:1",
                        "provider": "p",
                        "kind": "node-rpc",
                        "network": "finney",
                    }
                ]
            }
        },
        env={},
    )


async def test_healthz_reports_ok(aiohttp_client: Any) -> None:
    client = await aiohttp_client(create_app(_config()))
    r = await client.get("/healthz")
    assert r.status == 200
    body = await r.json()
    assert body["status"] == "ok" and body["endpoints"] == 1
    assert body["networks"] == ["finney", "test"]


async def test_unknown_path_and_wrong_method_are_json_errors(aiohttp_client: Any) -> None:
    client = await aiohttp_client(create_app(_config()))
    r = await client.get("/nope")
    assert r.status == 404 and (await r.json())["error"]["code"] == 404
    r = await client.post("/healthz")
    assert r.status == 405 and r.content_type == "application/json"
