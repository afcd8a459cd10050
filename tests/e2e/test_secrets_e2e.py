"""API keys in upstream URLs never leave the config file: not in API answers,
not in error bodies, not in either process's logs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from common.endpoint_id import endpoint_id
from tests.e2e.harness import Stack, free_port, http_json
from tests.e2e.helpers import PROXY_DEFAULTS, call, post, wait_until

pytestmark = pytest.mark.e2e

SECRETS = ("hunter2pass", "QUERYKEY0123456789", "pathkey0a1b2c3d4e5f6a7b8c9d0e1f2")


async def test_secrets_in_upstream_urls_are_never_shown(tmp_path: Path) -> None:
    stack = Stack(tmp_path)
    try:
        epoch = time.time() - 600
        a, b = stack.start_nodes(("alpha", "beta"), epoch=epoch)
        dead_port = free_port()
        urls = [
            a.url.replace("http://", f"http://user:{SECRETS[0]}@") + f"/?apikey={SECRETS[1]}",
            f"{b.url}/{SECRETS[2]}",
            f"http://127.0.0.1:{dead_port}/?token={SECRETS[1]}",  # nobody listens: errors
        ]
        sidecar_port = free_port()
        stack.write_config(
            {
                "proxy": {"networks": ["finney"], **PROXY_DEFAULTS},
                "sidecar": {"port": sidecar_port, "url": f"http://127.0.0.1:{sidecar_port}"},
                "data_dir": str(tmp_path / "data"),
                "probe": {"interval_s": 0.5, "head_interval_s": 0.3, "timeout_s": 1},
                "registry": {
                    "endpoints": [
                        {"url": u, "provider": f"p{i}", "kind": "node-rpc", "network": "finney"}
                        for i, u in enumerate(urls)
                    ]
                },
            }
        )
        stack.start_sidecar()
        stack.start_proxy()
        # a few probe rounds, incl. failures of the dead one (their errors name its URL)
        await wait_until(
            lambda: (
                all(_probes(stack, u) for u in urls[:2])
                and sum(p["classification"] == "dead" for p in _probes(stack, urls[2])) >= 2
            ),
            20,
            "the sidecar probed every endpoint, the dead one failing twice",
            step=0.2,
        )

        seen: list[str] = []
        for i in range(20):
            r = await post(stack.rpc_url(), call("system_health", id_=i))
            assert r.status == 200
            seen.append(r.raw.decode())
        a.proc.stop()
        b.proc.stop()
        r = await post(stack.rpc_url(), call("system_health"))
        assert r.status == 502
        seen.append(r.raw.decode())

        snap = http_json(f"{stack.sidecar_url}/api/v1/internal/routes/finney")
        seen.append(str(snap))
        for u in urls:
            seen.append(str(http_json(f"{stack.sidecar_url}/api/v1/endpoints/{endpoint_id(u)}")))
        assert any("***" in s for s in seen)  # redacted URLs are shown, secrets are not
        stack.stop()
        seen += [p.output() for p in stack.procs]
        blob = "\n".join(seen)
        for secret in SECRETS:
            assert secret not in blob, f"secret {secret} leaked"
    finally:
        stack.stop()


def _probes(stack: Stack, url: str) -> list[dict[str, object]]:
    """The sidecar's recent probes of the endpoint at ``url``."""
    doc = http_json(f"{stack.sidecar_url}/api/v1/endpoints/{endpoint_id(url)}")
    return doc["probes"]  # type: ignore[no-any-return]
