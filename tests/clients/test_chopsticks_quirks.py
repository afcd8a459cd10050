"""What chopsticks does that a production node would not, and what the proxy and
its probes make of it: an error without ``code``, the placeholder block-0 hash,
blocks only on ``dev_newBlock``, an answer on any HTTP path."""

from __future__ import annotations

from tests.clients.chopsticks import GENESIS_PLACEHOLDER
from tests.clients.chopsticks_stack import NETWORK, ChainStack, routes
from tests.clients.helpers import get_json, raw_post
from tests.e2e.helpers import next_client_ip


def test_an_error_without_code_is_passed_through_not_retried(both_endpoints: ChainStack) -> None:
    chain = both_endpoints
    # system_syncState is on the allowlist; chopsticks does not have it.
    status, headers, body = raw_post(
        chain.rpc_url, "system_syncState", source_ip=next_client_ip(), id_="s"
    )
    assert status == 200
    assert body == {
        "jsonrpc": "2.0",
        "id": "s",
        "error": {"message": "Method not found: system_syncState"},
    }
    assert headers["X-Chainproxy-Attempts"] == "1"  # a deterministic answer: no failover
    for front in chain.fronts:  # and no endpoint is blamed for it
        detail = get_json(f"{chain.stack.sidecar_url}/api/v1/endpoints/{front.endpoint_id}")
        assert detail["status"] == "OK", detail


def test_probes_see_chopsticks_as_a_live_synced_archive_node(both_endpoints: ChainStack) -> None:
    chain = both_endpoints
    snapshot = routes(chain.stack)
    assert snapshot["tip"] == chain.node.best() == snapshot["finalized"]
    assert len(snapshot["upstreams"]) == 2
    for up in snapshot["upstreams"]:
        assert (up["classification"], up["healthy"], up["synced"]) == ("live", True, True)
        assert up["archive"] is True  # state at block 1 is readable


def test_the_placeholder_genesis_is_served_but_never_cached(both_endpoints: ChainStack) -> None:
    chain = both_endpoints
    ip = next_client_ip()
    _, _, body = raw_post(chain.rpc_url, "chain_getBlockHash", [0], source_ip=ip)
    assert body["result"] == GENESIS_PLACEHOLDER
    for _ in range(2):
        status, headers, body = raw_post(
            chain.rpc_url, "chain_getBlock", [GENESIS_PLACEHOLDER], source_ip=ip
        )
        assert status == 200
        assert int(body["result"]["block"]["header"]["number"], 16) == 0
        # its header does not hash to 0x45…45: served, never cached as that block
        assert headers["X-Cache"] == "MISS"


def test_blocks_come_only_from_dev_new_block_which_the_proxy_refuses(
    both_endpoints: ChainStack,
) -> None:
    chain = both_endpoints
    ip = next_client_ip()
    before = chain.node.best()
    status, _, body = raw_post(chain.rpc_url, "dev_newBlock", [{"count": 1}], source_ip=ip)
    assert status == 403 and body["error"]["data"]["policy"] == "allowlist"
    assert chain.node.best() == before

    best = chain.node.new_blocks(1)  # straight to chopsticks
    _, _, body = raw_post(chain.rpc_url, "chain_getHeader", source_ip=ip)
    assert int(body["result"]["number"], 16) == best == before + 1
    _, _, body = raw_post(chain.rpc_url, "chain_getBlockHash", [best], source_ip=ip)
    assert body["result"] == chain.node.rpc("chain_getBlockHash", [best])
    chain.wait_all_synced()  # and the probes follow the new head


def test_other_paths_never_reach_chopsticks_which_answers_any_path(
    both_endpoints: ChainStack,
) -> None:
    chain = both_endpoints
    ip = next_client_ip()
    # chopsticks itself answers JSON-RPC on any path ...
    _, _, body = raw_post(f"{chain.node.url}/any/path", "system_chain", source_ip=ip)
    assert "result" in body
    # ... the proxy forwards only /rpc/v1/<network>
    base = chain.stack.proxy_url
    status, _, body = raw_post(f"{base}/rpc/v1/{NETWORK}/extra", "system_chain", source_ip=ip)
    assert status == 404 and body["error"]["code"] == -32601
    status, _, body = raw_post(f"{base}/any/path", "system_chain", source_ip=ip)
    assert status == 404 and (body is None or "result" not in body)  # the sidecar's 404
