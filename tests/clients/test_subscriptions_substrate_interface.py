"""Python ``substrate-interface`` 1.8.1 over ``ws://`` through chainproxy, on
chopsticks: ``subscribe_block_headers`` (new heads, then ``finalized_only``)
with a handler that stops after BLOCKS new blocks, made once the first header
(the current head) arrived. Every wait is bounded: the client's socket has a
30 s read timeout."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.clients.chopsticks_stack import ChainStack
from tests.clients.subscriptions import assert_chain, wait_ws_synced
from tests.clients.substrate_client import substrate_ws
from tests.e2e.helpers import next_client_ip

BLOCKS = 3


@pytest.mark.parametrize("finalized_only", [False, True], ids=["new", "finalized"])
def test_subscribe_block_headers_over_websocket_gets_every_block(
    both_endpoints: ChainStack, finalized_only: bool
) -> None:
    chain = both_endpoints
    wait_ws_synced(chain)
    start = chain.node.best()
    seen: list[dict[str, Any]] = []
    maker = threading.Thread(target=lambda: [chain.node.new_blocks(1) for _ in range(BLOCKS)])

    def handler(obj: dict[str, Any], update_nr: int, subscription_id: str) -> Any:
        seen.append({**obj["header"], "update_nr": update_nr, "sub": subscription_id})
        if update_nr == 0:
            maker.start()  # the subscription is live: make the blocks
        return obj["header"]["number"] if update_nr >= BLOCKS else None

    s = substrate_ws(chain.rpc_url, next_client_ip())
    try:
        last = s.subscribe_block_headers(handler, finalized_only=finalized_only)
    finally:
        s.close()
        maker.join(30)

    numbers = [h["number"] for h in seen]
    assert numbers == list(range(start, start + BLOCKS + 1)), numbers
    assert last == numbers[-1] == chain.node.best()
    assert [h["update_nr"] for h in seen] == list(range(BLOCKS + 1))
    assert len({h["sub"] for h in seen}) == 1  # one subscription throughout
    # each header is the chain's block at that height (its parent hash links them)
    assert_chain(chain, numbers[:-1], [h["parentHash"] for h in seen[1:]])
