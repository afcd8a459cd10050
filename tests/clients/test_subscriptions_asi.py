"""async-substrate-interface 2.2.1 (the bittensor SDK's WebSocket client, in
``.venv-asi``) following new heads through chainproxy's WebSocket on chopsticks
while blocks are made (``tests/clients/asi/subs_client.py``):

* its WebSocket manager subscribing itself (``chain_subscribeNewHeads``): the
  current head, then every new block once, in order, on one subscription id;
* its high-level ``subscribe_block_headers`` and ``wait_for_block``. Their
  runtime loading asks ``state_call Metadata_metadata_at_version`` first and
  takes its v14 fallback only on Substrate's own error text; chopsticks' runtime
  has no metadata v15 and answers "Function to start was not found." (the proxy
  passes that answer through unchanged: step "v15"), so the client script takes
  the fallback on that text too. Nothing else is changed in the client.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from addon.chain.header_hash import header_hash
from tests.clients.chopsticks_stack import ChainStack
from tests.clients.helpers import eventually
from tests.clients.subscriptions import (
    assert_chain,
    run_block_asking,
    subscribes_served,
    wait_ws_synced,
)
from tests.e2e.harness import REPO
from tests.e2e.helpers import next_client_ip

ASI_PYTHON = REPO / ".venv-asi" / "bin" / "python"
ASI_READY = REPO / ".venv-asi" / ".installed"
CLIENT = Path(__file__).parent / "asi" / "subs_client.py"
BLOCKS = 3


pytestmark = pytest.mark.skipif(
    not ASI_READY.exists(), reason="async-substrate-interface venv missing: run `make asi-deps`"
)


def test_async_substrate_interface_follows_new_heads_through_the_proxy(
    both_endpoints: ChainStack, tmp_path: Path
) -> None:
    chain = both_endpoints
    wait_ws_synced(chain)
    served_before = subscribes_served(chain).get("chain_subscribeNewHeads", 0)
    start = chain.node.best()
    argv = [str(ASI_PYTHON), str(CLIENT), chain.ws_rpc_url, next_client_ip(), str(BLOCKS)]
    steps = run_block_asking(argv, chain, tmp_path)
    log = steps["log"]["text"]
    for name in ("manager", "high_level"):  # a step that failed reports its error
        assert "error" not in steps.get(name, {}), (steps[name], log)

    # 1. the WebSocket manager: the current head, then each new block, one id
    manager = steps["manager"]
    headers = [h["header"] for h in manager["heads"]]
    numbers = [int(h["number"], 16) for h in headers]
    assert numbers == list(range(start, start + BLOCKS + 1)), numbers
    assert_chain(chain, numbers, [header_hash(h) for h in headers])
    assert {h["sub"] for h in manager["heads"]} == {manager["subscription"]}

    # what stops the high-level API on chopsticks, as the proxy passed it on
    v15 = steps["v15"]["answer"]
    assert v15["error"]["message"] == "Function to start was not found.", v15

    # 2. subscribe_block_headers: the head, then BLOCKS new blocks, in order
    sub = steps["subscribe_block_headers"]
    numbers = [h["number"] for h in sub["heads"]]
    first = numbers[0]
    assert numbers == list(range(first, first + BLOCKS + 1)), numbers
    assert sub["returned"] == numbers[-1]
    for n, h in zip(numbers[1:], sub["heads"][1:], strict=True):
        assert h["parentHash"] == chain.node.rpc("chain_getBlockHash", [n - 1])

    # 3. wait_for_block(head + 2) returns when that block is made
    wait = steps["wait_for_block"]
    assert wait["reached"] == wait["target"] == chain.node.best()

    # the three subscriptions were served by the proxy's subscription path
    assert eventually(
        lambda: subscribes_served(chain).get("chain_subscribeNewHeads", 0) >= served_before + 3
    ), subscribes_served(chain)
