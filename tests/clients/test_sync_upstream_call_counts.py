"""Head pinning, coalescing and hedging cut upstream calls for real clients on a
real runtime: async-substrate-interface clients (``.venv-asi``) running a
metagraph-style sync at the same time after each new block, calls counted
where they reach chopsticks (counting endpoint fronts;
``tests/clients/sync_runs.py``), in three runs: straight to the node, through
chainproxy with coalescing, head pinning and hedging off, and through
chainproxy with the defaults. Only counts and answers are asserted, never
times.

Why 6 clients: per block each client sends 16 calls. 11 of them are one upstream
call per block whoever sends them (pinned to the head, or carrying a block hash:
shared in flight or answered from the edge cache); the other 5 (4 ``chain_getHead``
and the raw read sent right after the first, which must not be pinned while the
proxy has not seen that head's header) are shared only when in flight together,
which a loaded machine may prevent. Even with none of those shared and the hedge
budget spent in full (5 + 0.1 a forwarded call), 6 clients stay under half:
(11 + 5 x 6) x 2 blocks + 13 hedges = 95 of 192.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.clients.chopsticks_stack import ChainStack, start_chain_stack
from tests.clients.sync_runs import ASI_READY, PATIENT_FAILOVER, Run, run_all, wrong_answers

CLIENTS = 6
BLOCKS = 2
# sent without a block hash: without pinning nothing can cache or share them
HASHLESS = (
    "chain_getHead",
    "state_getStorage",
    "state_call",
    "state_getStorageAt",
    "state_getKeysPaged",
    "state_queryStorageAt",
)

pytestmark = [
    pytest.mark.skipif(
        not ASI_READY.exists(), reason="async-substrate-interface venv missing: run `make asi-deps`"
    ),
    # The module's chain stack and its 3 x 6 client processes are set up once, by
    # the fixture, whose every wait ends on a condition (a node answering, a
    # client's step or exit) with a guard against a hang, not against a slow
    # machine; the timeout is the tests' own (reading the runs, asking chopsticks).
    pytest.mark.timeout(300, func_only=True),
]


@dataclass
class Measured:
    chain: ChainStack
    runs: dict[str, Run]  # by name: "direct", "features off", "chainproxy"


@pytest.fixture(scope="module")
def measured(genesis: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Measured]:
    """The three runs, on a chain stack of its own whose fronts count calls, its
    proxies waiting for chopsticks however long a loaded machine makes it take."""
    tmp = tmp_path_factory.mktemp("upstream-calls")
    chain = start_chain_stack(
        tmp / "stack", genesis, count=True, proxy_extra={"failover": PATIENT_FAILOVER}
    )
    try:
        runs = run_all(chain, CLIENTS, BLOCKS, tmp / "clients")
        yield Measured(chain, {r.name: r for r in runs})
    finally:
        chain.stop()


@pytest.fixture
def runs(measured: Measured) -> dict[str, Run]:
    return measured.runs


def _total(counts: dict[str, int]) -> int:
    return sum(counts.values())


def test_every_client_got_the_nodes_answer_at_its_block(measured: Measured) -> None:
    for name, run in measured.runs.items():
        assert run.errors == [], (name, run.errors)
        assert len(run.syncs) == CLIENTS * BLOCKS
        assert wrong_answers(measured.chain, run) == [], name
    # and the check can fail: the last block's answers are not those of the block before
    syncs = measured.runs["chainproxy"].syncs
    earlier = syncs[0]["block"]
    stale = Run("stale", CLIENTS, 1, syncs=[{**s, "block": earlier} for s in syncs[-CLIENTS:]])
    # per client at least: the head, System.Number, Timestamp.Now
    assert len(wrong_answers(measured.chain, stale)) >= CLIENTS * 3


def test_direct_every_call_reaches_the_node_and_the_counter_sees_each(
    runs: dict[str, Run],
) -> None:
    direct = runs["direct"]
    assert _total(direct.client_calls) == CLIENTS * BLOCKS * 16, direct.client_calls
    assert direct.upstream_calls == direct.client_calls


def test_features_off_every_call_without_a_hash_reaches_the_node(runs: dict[str, Run]) -> None:
    off = runs["features off"]
    assert off.client_calls == runs["direct"].client_calls  # the same sync, whatever the URL
    for method in HASHLESS:
        assert off.upstream_calls[method] >= off.client_calls[method], method
    # only calls carrying a block hash (header, runtime version) can be edge-cache hits
    assert _total(off.upstream_calls) >= 0.8 * _total(off.client_calls), off.upstream_calls


def test_chainproxy_sends_at_most_half_the_clients_calls_upstream(runs: dict[str, Run]) -> None:
    on = runs["chainproxy"]
    assert on.client_calls == runs["direct"].client_calls
    assert _total(on.upstream_calls) <= 0.5 * _total(on.client_calls), (
        on.upstream_calls,
        on.client_calls,
    )
    # each storage read and keys page sent without a hash: pinned, one upstream call
    # per distinct read and block (+ hedges, which go only to calls slower than the
    # learned p95: state reads of chopsticks seldom are), never one per client
    for method, distinct in (("state_getStorageAt", 3), ("state_getKeysPaged", 2)):
        assert on.upstream_calls[method] < on.client_calls[method], method
        assert on.upstream_calls[method] >= distinct * BLOCKS, method
