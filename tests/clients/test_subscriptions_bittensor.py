"""The bittensor SDK (PyPI 11.3.0, ``.venv-bt``: ``make bt-deps``) through
chainproxy's WebSocket on chopsticks (``tests/clients/bt/client.py``).

chopsticks is Rococo Asset Hub, not subtensor: as shipped, ``bt.Subtensor(url)``
cannot connect to it, and the test pins down why (each answer passed through by
the proxy unchanged): the SDK's metadata-v15 call is answered "Function to start
was not found." (its v14 fallback waits for Substrate's own text), and then its
connect reads ``SubtensorModule.TokenSymbol``, a pallet this chain does not have.
With those two worked around in the client script (fallback needle, seeded
token-symbol cache), the SDK's reads, ``wait_for_block`` and its ``blocks()``
head stream (``chain_subscribeNewHeads``) run through the proxy.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.clients.chopsticks_stack import ChainStack
from tests.clients.helpers import eventually
from tests.clients.subscriptions import run_block_asking, subscribes_served, wait_ws_synced
from tests.e2e.harness import REPO
from tests.e2e.helpers import next_client_ip

BT_PYTHON = REPO / ".venv-bt" / "bin" / "python"
BT_READY = REPO / ".venv-bt" / ".installed"
CLIENT = Path(__file__).parent / "bt" / "client.py"
BLOCKS = 3


pytestmark = pytest.mark.skipif(
    not BT_READY.exists(),
    reason="bittensor SDK venv missing: run `make bt-deps` (bittensor==11.3.0)",
)


def test_bittensor_sdk_reads_and_waits_for_blocks_through_the_proxy(
    both_endpoints: ChainStack, tmp_path: Path
) -> None:
    chain = both_endpoints
    wait_ws_synced(chain)
    served_before = subscribes_served(chain).get("chain_subscribeNewHeads", 0)
    start = chain.node.best()
    argv = [str(BT_PYTHON), str(CLIENT), chain.ws_rpc_url, next_client_ip(), str(BLOCKS)]
    steps = run_block_asking(argv, chain, tmp_path)
    log = steps["log"]["text"]
    assert steps["version"]["bittensor"] == "11.3.0"

    # as shipped: no connect to a chain without metadata v15 / subtensor's pallets
    assert steps["as_is"]["error"] == "RpcConnectionError: Function to start was not found.", log
    assert steps["v15"]["error"] == (
        "StorageFunctionNotFound: storage function SubtensorModule.TokenSymbol not found"
    ), log
    assert steps["symbols"]["block"] == start, log

    reads = steps["reads"]
    assert "error" not in reads, log
    assert reads["block"] == reads["finalized_block"] == start
    assert reads["spec_version"] == 900
    assert reads["has_get_current_block"] is False  # 11.3.0: the `.block` property instead

    wait = steps["wait_for_block"]
    assert wait["header"] == wait["target"] == start + 2

    heads = steps["blocks"].get("heads")
    assert heads is not None, (steps["blocks"], log)
    numbers = [h["number"] for h in heads]
    first = numbers[0]
    assert numbers == list(range(first, first + BLOCKS + 1)), numbers
    assert numbers[-1] == chain.node.best()
    for n, h in zip(numbers[1:], heads[1:], strict=True):
        assert h["parentHash"] == chain.node.rpc("chain_getBlockHash", [n - 1])

    # wait_for_block and blocks() were served by the proxy's subscription path
    assert eventually(
        lambda: subscribes_served(chain).get("chain_subscribeNewHeads", 0) >= served_before + 2
    ), subscribes_served(chain)
