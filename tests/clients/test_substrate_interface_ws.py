"""Python ``substrate-interface`` over WebSocket (``ws://…/rpc/v1/<network>``)
through chainproxy, over chopsticks: the high-level API reads the chain as it
does over HTTP, a write is refused with the proxy's own JSON-RPC error (a
WebSocket client sees the message, not an HTTP status), the quota counts."""

from __future__ import annotations

import pytest
from substrateinterface import Keypair
from substrateinterface.exceptions import SubstrateRequestException

from tests.clients.chopsticks import CHAIN_NAME
from tests.clients.chopsticks_stack import ChainStack
from tests.clients.substrate_client import substrate_ws
from tests.e2e.helpers import next_client_ip

ALICE = "5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQY"


def test_high_level_reads_over_websocket_match_the_chain(both_endpoints: ChainStack) -> None:
    chain = both_endpoints
    best = chain.node.new_blocks(1)
    chain.wait_all_synced()
    node = chain.node

    s = substrate_ws(chain.rpc_url, next_client_ip())
    try:
        assert s.chain == CHAIN_NAME
        head = s.get_chain_head()
        assert head == node.rpc("chain_getBlockHash", [best])
        assert s.get_block_number(head) == best
        hash1 = s.get_block_hash(1)
        assert hash1 == node.rpc("chain_getBlockHash", [1])
        block = s.get_block(block_hash=hash1)
        assert block["header"]["number"] == 1
        calls = [xt.value["call"]["call_module"] for xt in block["extrinsics"]]
        assert "Timestamp" in calls
        assert s.query("System", "Number").value == best
        assert s.query("System", "Number", block_hash=hash1).value == 1
        account = s.query("System", "Account", [ALICE]).value
        assert account["nonce"] == 0
        assert s.get_constant("Balances", "ExistentialDeposit").value == 3333333
    finally:
        s.close()


def test_a_write_over_websocket_is_refused_with_the_reason(both_endpoints: ChainStack) -> None:
    chain = both_endpoints
    s = substrate_ws(chain.rpc_url, next_client_ip())
    try:
        s.init_runtime()
        alice = Keypair.create_from_uri("//Alice", ss58_format=s.ss58_format)
        bob = Keypair.create_from_uri("//Bob", ss58_format=s.ss58_format)
        call = s.compose_call(
            "Balances", "transfer_keep_alive", {"dest": bob.ss58_address, "value": 1}
        )
        xt = s.create_signed_extrinsic(call=call, keypair=alice)
        with pytest.raises(SubstrateRequestException, match="method not allowed"):
            s.submit_extrinsic(xt)
        assert chain.node.rpc("author_pendingExtrinsics") == []
        # the session goes on over the same socket
        assert s.get_block_number(s.get_chain_head()) == chain.node.best()
    finally:
        s.close()


def test_over_the_limit_the_websocket_client_sees_the_quota_error(
    both_endpoints: ChainStack,
) -> None:
    chain = both_endpoints
    s = substrate_ws(chain.rpc_url, next_client_ip())
    try:
        served = 1  # system_chain, when the client was built
        with pytest.raises(SubstrateRequestException, match="rate limit exceeded"):
            for _ in range(200):
                s.rpc_request("system_health", [])
                served += 1
        assert served == 100
    finally:
        s.close()
