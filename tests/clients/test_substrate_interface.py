"""Python ``substrate-interface`` (HTTP) through chainproxy, over chopsticks: the
high-level API a user calls, the refusals as it shows them, and an endpoint
dying in the middle of a session."""

from __future__ import annotations

import pytest
from substrateinterface import Keypair
from substrateinterface.exceptions import SubstrateRequestException

from tests.clients.chopsticks import CHAIN_NAME
from tests.clients.chopsticks_stack import ChainStack
from tests.clients.helpers import eventually, failovers, raw_post
from tests.clients.substrate_client import substrate
from tests.e2e.helpers import next_client_ip

ALICE = "5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQY"


def test_high_level_reads_match_the_chain(both_endpoints: ChainStack) -> None:
    chain = both_endpoints
    best = chain.node.new_blocks(1)
    chain.wait_all_synced()
    node = chain.node  # chopsticks itself, not through the proxy: the truth

    s = substrate(chain.rpc_url, next_client_ip())  # calls system_chain
    assert s.chain == CHAIN_NAME

    head = s.get_chain_head()
    assert head == node.rpc("chain_getBlockHash", [best])
    assert s.get_block_number(head) == best
    hash1 = s.get_block_hash(1)
    assert hash1 == node.rpc("chain_getBlockHash", [1])

    block = s.get_block(block_hash=hash1)
    assert block["header"]["number"] == 1
    assert block["header"]["hash"] == hash1
    calls = [xt.value["call"]["call_module"] for xt in block["extrinsics"]]
    assert "Timestamp" in calls  # decoded with the runtime's own metadata

    version = s.get_block_runtime_version(head)
    assert (version["specName"], version["specVersion"]) == ("statemine", 900)
    s.init_runtime(block_hash=head)
    pallets = {p.name for p in s.metadata.pallets}
    assert {"System", "Balances", "Assets", "Aura"} <= pallets

    assert s.query("System", "Number").value == best
    assert s.query("System", "Number", block_hash=hash1).value == 1
    account = s.query("System", "Account", [ALICE]).value
    assert account["nonce"] == 0 and account["data"]["free"] == 0
    assert s.get_constant("Balances", "ExistentialDeposit").value == 3333333


def test_a_write_is_refused_and_the_client_says_so(both_endpoints: ChainStack) -> None:
    chain = both_endpoints
    ip = next_client_ip()
    s = substrate(chain.rpc_url, ip)
    s.init_runtime()
    alice = Keypair.create_from_uri("//Alice", ss58_format=s.ss58_format)
    bob = Keypair.create_from_uri("//Bob", ss58_format=s.ss58_format)
    call = s.compose_call("Balances", "transfer_keep_alive", {"dest": bob.ss58_address, "value": 1})
    xt = s.create_signed_extrinsic(call=call, keypair=alice)  # reads nonce, metadata: allowed

    with pytest.raises(SubstrateRequestException, match="HTTP status code 403"):
        s.submit_extrinsic(xt)
    # The contract behind that message, and nothing reached the chain.
    status, _, body = raw_post(
        chain.rpc_url, "author_submitExtrinsic", [str(xt.data)], source_ip=ip
    )
    assert status == 403
    assert body["error"]["code"] == -32601
    assert body["error"]["data"]["policy"] == "allowlist"
    assert chain.node.rpc("author_pendingExtrinsics") == []
    # the session goes on
    assert s.get_block_number(s.get_chain_head()) == chain.node.best()


def test_over_the_limit_the_client_sees_429(both_endpoints: ChainStack) -> None:
    chain = both_endpoints
    ip = next_client_ip()
    s = substrate(chain.rpc_url, ip)
    served = 1  # system_chain, when the client was built
    with pytest.raises(SubstrateRequestException, match="HTTP status code 429"):
        for _ in range(200):
            s.rpc_request("system_health", [])
            served += 1
    assert served == 100  # the 101st call in the window is the one refused
    with pytest.raises(SubstrateRequestException, match="429"):
        s.get_chain_head()  # the high-level API too

    status, headers, body = raw_post(chain.rpc_url, "system_health", source_ip=ip)
    assert status == 429
    assert body["error"]["code"] == -32005
    assert body["error"]["data"]["policy"] == "100;w=60"
    assert 0 < body["error"]["data"]["retry_after"] <= 60
    assert int(headers["Retry-After"]) > 0 and headers["X-RateLimit-Remaining"] == "0"


def test_an_endpoint_stops_mid_session_and_the_session_goes_on(
    both_endpoints: ChainStack,
) -> None:
    chain = both_endpoints
    s = substrate(chain.rpc_url, next_client_ip())
    s.init_runtime()
    before = s.get_block_number(s.get_chain_head())
    best = chain.node.new_blocks(2)  # the chain moves on
    failovers_before = failovers(chain)

    assert chain.used_endpoint() == chain.fast.endpoint_id  # the endpoint in use ...
    chain.fast.stop()  # ... goes away

    for _ in range(10):
        head = s.get_chain_head()
        number = s.get_block_number(head)
        assert s.query("System", "Number", block_hash=head).value == number
        assert s.get_block(block_hash=head)["header"]["number"] == number
    assert number == best == before + 2  # the client follows the chain, no error
    # and it was the proxy that hid the dead endpoint from it
    assert eventually(lambda: failovers(chain) > failovers_before), "no failover recorded"
