"""Two chopsticks started from the same genesis are two forks (each builds block
#1 with its own wall-clock time). A read pinned to a block hash that one
upstream does not know must be answered by the one that does.

chopsticks does not answer an unknown hash with ``null``: it answers with its
genesis block (and files it under that hash). The proxy recognises that block
#0 is not the block asked for (its header does not hash to the hash) and fails
over, as it does on ``null``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from addon.chain.header_hash import header_hash
from common.endpoint_id import endpoint_id
from tests.clients.chopsticks import Chopsticks, start_chopsticks
from tests.clients.chopsticks_stack import proxy_config, wait_routes
from tests.clients.helpers import raw_post
from tests.clients.substrate_client import substrate
from tests.e2e.harness import Stack, free_port
from tests.e2e.helpers import next_client_ip


@dataclass
class Forks:
    stack: Stack
    ahead: Chopsticks  # the tip: the proxy asks it first
    behind: Chopsticks  # a fork that lags: asked second

    @property
    def rpc_url(self) -> str:
        return self.stack.rpc_url("assethub")


@pytest.fixture(scope="module")
def forks(genesis: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Forks]:
    tmp = tmp_path_factory.mktemp("forks")
    stack = Stack(tmp)
    try:
        nodes = [start_chopsticks(name, genesis, tmp) for name in ("fork-ahead", "fork-behind")]
        stack.procs.extend(n.proc for n in nodes)
        for n in nodes:
            n.wait_ready()
        ahead, behind = nodes
        # Block #1's timestamp is chopsticks' clock rounded to a slot: two instances
        # building it within one slot would build the same block. Put the fork an
        # hour ahead so the two chains really differ from block #1 on.
        behind.rpc("dev_timeTravel", [int(time.time() * 1000) + 3_600_000])
        ahead.new_blocks(5)  # best 6
        behind.new_blocks(1)  # best 2: more than max_lag_blocks (3) behind
        stack.write_config(
            proxy_config(
                tmp / "data",
                [(ahead.url, "fork-ahead"), (behind.url, "fork-behind")],
                sidecar_port=free_port(),
            )
        )
        stack.start_sidecar()
        stack.start_proxy()
        a_id, b_id = endpoint_id(ahead.url), endpoint_id(behind.url)

        def ahead_first(ups: dict[str, Any]) -> bool:
            return (
                a_id in ups
                and b_id in ups
                and ups[a_id]["synced"]
                and ups[b_id]["healthy"]
                and not ups[b_id]["synced"]
            )

        wait_routes(stack, ahead_first, timeout=60)
    except BaseException:
        stack.stop()
        raise
    yield Forks(stack, ahead, behind)
    stack.stop()


def test_two_instances_from_one_genesis_are_two_forks(forks: Forks) -> None:
    a1 = forks.ahead.rpc("chain_getBlockHash", [1])
    b1 = forks.behind.rpc("chain_getBlockHash", [1])
    assert a1 != b1


def test_a_block_only_one_fork_knows_is_fetched_from_that_fork(forks: Forks) -> None:
    wanted = forks.behind.rpc("chain_getBlockHash", [2])
    # The fork that does not know it answers with its genesis, not null:
    alien = forks.ahead.rpc("chain_getHeader", [wanted])
    assert int(alien["number"], 16) == 0

    ip = next_client_ip()
    for method in ("chain_getBlock", "chain_getHeader"):
        status, headers, body = raw_post(forks.rpc_url, method, [wanted], source_ip=ip)
        assert status == 200
        header = body["result"]["block"]["header"] if method == "chain_getBlock" else body["result"]
        assert int(header["number"], 16) == 2
        assert header_hash(header) == wanted  # really the block asked for
        assert headers["X-Chainproxy-Attempts"] == "2"  # the tip first, then the fork
        assert headers["X-Chainproxy-Upstream"] == endpoint_id(forks.behind.url)
        # the right block is what gets cached
        status, headers, again = raw_post(forks.rpc_url, method, [wanted], source_ip=ip)
        assert headers["X-Cache"] == "HIT" and again["result"] == body["result"]


def test_substrate_interface_gets_the_forks_block(forks: Forks) -> None:
    wanted = forks.behind.rpc("chain_getBlockHash", [1])
    s = substrate(forks.rpc_url, next_client_ip())
    block = s.get_block(block_hash=wanted)
    assert block["header"]["number"] == 1
    assert block["header"]["hash"] == wanted
    assert (
        block["header"]["parentHash"] == forks.behind.rpc("chain_getHeader", [wanted])["parentHash"]
    )
