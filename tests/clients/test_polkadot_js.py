"""polkadot.js (``@polkadot/api`` 16.5.6, ``HttpProvider``) through chainproxy, over
chopsticks: raw ``send`` calls and a full metadata-driven ``ApiPromise`` session,
the refusals as the library reports them, and an endpoint dying mid-session."""

from __future__ import annotations

from typing import Any

from tests.clients.chopsticks import CHAIN_NAME, GENESIS_PLACEHOLDER
from tests.clients.chopsticks_stack import ChainStack
from tests.clients.helpers import eventually, failovers
from tests.e2e.helpers import next_client_ip


def test_raw_calls_and_a_metadata_driven_session(
    both_endpoints: ChainStack, polkadot_js: Any
) -> None:
    chain = both_endpoints
    best = chain.node.new_blocks(1)
    chain.wait_all_synced()

    steps = polkadot_js("read", chain.rpc_url, next_client_ip()).steps()

    raw = steps["raw"]  # HttpProvider.send
    assert raw["chain"] == CHAIN_NAME
    assert raw["hash1"] == chain.node.rpc("chain_getBlockHash", [1])
    assert int(raw["head"]["number"], 16) == best

    api = steps["api"]  # ApiPromise over HttpProvider: metadata, decoding, queries
    assert api["genesisHash"] == GENESIS_PLACEHOLDER  # chopsticks' block-0 "hash", passed through
    assert (api["specName"], api["specVersion"]) == ("statemine", 900)
    assert {"System", "Balances", "Assets"} <= set(api["pallets"])
    assert api["head"] == best and api["systemNumber"] == best
    assert api["headHash"] == chain.node.rpc("chain_getBlockHash", [best])  # hashed by the client
    assert api["ss58Prefix"] == 2 and api["existentialDeposit"] == "3333333"
    assert api["block1Number"] == 1 and api["block1Hash"] == raw["hash1"]
    assert api["aliceNonce"] == 0 and api["aliceFree"] == "0"


def test_a_write_is_refused_and_polkadot_js_says_so(
    both_endpoints: ChainStack, polkadot_js: Any
) -> None:
    chain = both_endpoints
    steps = polkadot_js("refusals", chain.rpc_url, next_client_ip()).steps()

    # signAndSend: nonce and metadata are reads (allowed); the submission never
    # leaves the library: the proxy's rpc_methods lists no write, so polkadot.js
    # does not decorate author.submitExtrinsic
    assert "accepted" not in steps["signAndSend"], steps["signAndSend"]
    assert "author.submitExtrinsic is not a function" in steps["signAndSend"]["error"]
    assert steps["send"]["error"].startswith("[403]: Forbidden")
    # HttpProvider shows only the status line; the body is the contract
    contract = steps["contract"]
    assert contract["status"] == 403
    assert contract["body"]["id"] == 7
    assert contract["body"]["error"]["code"] == -32601
    assert contract["body"]["error"]["data"]["policy"] == "allowlist"
    assert chain.node.rpc("author_pendingExtrinsics") == []  # nothing reached the chain
    assert steps["after"]["head"] == chain.node.best()  # the session goes on


def test_over_the_limit_polkadot_js_sees_429(both_endpoints: ChainStack, polkadot_js: Any) -> None:
    chain = both_endpoints
    steps = polkadot_js("ratelimit", chain.rpc_url, next_client_ip()).steps()

    limit = steps["limit"]
    assert limit["error"].startswith("[429]: Too Many Requests")
    assert 80 < limit["ok"] < 100  # the rest of the 100 went to ApiPromise.create
    contract = steps["contract"]
    assert contract["status"] == 429
    assert contract["body"]["error"]["code"] == -32005
    assert contract["body"]["error"]["data"]["policy"] == "100;w=60"
    assert 0 < contract["body"]["error"]["data"]["retry_after"] <= 60
    assert contract["headers"]["x-ratelimit-remaining"] == "0"
    assert int(contract["headers"]["retry-after"]) > 0


def test_an_endpoint_stops_mid_session_and_polkadot_js_goes_on(
    both_endpoints: ChainStack, polkadot_js: Any
) -> None:
    chain = both_endpoints
    session = polkadot_js("failover", chain.rpc_url, next_client_ip())
    ready = session.next_step()
    assert ready["step"] == "ready" and ready["head"] == chain.node.best()
    best = chain.node.new_blocks(2)  # the chain moves on
    failovers_before = failovers(chain)

    assert chain.used_endpoint() == chain.fast.endpoint_id  # the endpoint in use ...
    chain.fast.stop()  # ... goes away
    session.send_line("go")

    seen = session.steps()["after"]["seen"]
    assert len(seen) == 8  # every call answered, no error
    assert all(s["head"] == s["systemNumber"] == s["block"] == best for s in seen)
    # and it was the proxy that hid the dead endpoint from it
    assert eventually(lambda: failovers(chain) > failovers_before), "no failover recorded"
