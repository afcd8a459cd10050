"""The reply's headers: chainproxy's own and Metagraphed's ``x-metagraph-rpc-*``
(endpoint id, provider, attempts, cache) telling the same story."""

from __future__ import annotations

from tests.addon.helpers import body, cached_stages, call, rpc_flow, run

H = "0x" + "ab" * 32


async def test_metagraphed_headers_name_the_upstream_then_the_cache() -> None:
    stages, fake, rt = cached_stages()
    f1 = await run(stages, rpc_flow(call("chain_getBlock", [H], id_=1)))
    h = f1.response.headers
    assert h["X-Cache"] == "MISS" and h["x-metagraph-rpc-cache"] == "miss"
    assert h["x-metagraph-rpc-endpoint-id"] == h["X-Chainproxy-Upstream"]
    assert h["x-metagraph-rpc-endpoint-id"].startswith("endpoint-srf-")
    served = {e.id: e.provider for e in rt.config.endpoints}[h["X-Chainproxy-Upstream"]]
    assert h["x-metagraph-rpc-provider"] == served and served in ("alpha", "beta")
    assert h["x-metagraph-rpc-attempts"] == "1" == h["X-Chainproxy-Attempts"]
    f2 = await run(stages, rpc_flow(call("chain_getBlock", [H], id_=2)))
    h = f2.response.headers
    assert h["x-metagraph-rpc-cache"] == "hit" and body(f2)["id"] == 2
    # Answered from the cache: no upstream served it, so no endpoint is named.
    assert "x-metagraph-rpc-endpoint-id" not in h and "x-metagraph-rpc-provider" not in h
    assert len(fake.seen) == 1
