"""Pure tests of the simulated chain model and JSON-RPC dispatcher (no sockets)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from addon.chain.header_hash import header_hash
from simnode.chain import (
    FINNEY_GENESIS,
    PRUNING_DEPTH,
    ZERO_HASH,
    Chain,
    ChainConfig,
)
from simnode.rpc import Dispatcher, RpcError, parse
from tests.fakes import FakeClock
from tests.simnode.helpers import EPOCH

HASH = re.compile(r"0x[0-9a-f]{64}")


def make_chain(clock: FakeClock | None = None, **kw: Any) -> tuple[Chain, FakeClock]:
    clock = clock or FakeClock(EPOCH)
    kw.setdefault("epoch", EPOCH)
    kw.setdefault("start_height", 1000)
    kw.setdefault("block_time", 12.0)
    return Chain(ChainConfig(**kw), clock), clock


def rpc(d: Dispatcher, method: str, params: Any = None) -> Any:
    return d.call(method, params)


# ---- heights ------------------------------------------------------------------------


def test_height_follows_clock() -> None:
    chain, clock = make_chain()
    assert chain.best() == 1000
    clock.t = EPOCH + 11.99
    assert chain.best() == 1000
    clock.t = EPOCH + 12
    assert chain.best() == 1001
    clock.t = EPOCH + 12 * 50 + 5
    assert chain.best() == 1050


def test_height_never_below_start() -> None:
    chain, _ = make_chain(clock=FakeClock(EPOCH - 3600))
    assert chain.best() == 1000


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        ChainConfig(block_time=0)
    with pytest.raises(ValueError):
        ChainConfig(genesis="0x1234")
    with pytest.raises(ValueError):
        ChainConfig(start_height=-1)


def test_finality_lags_two_blocks() -> None:
    chain, _ = make_chain()
    assert chain.finalized() == 998
    low, _ = make_chain(start_height=1)
    assert low.finalized() == 0


# ---- hashes, replicas, forks -----------------------------------------------------------


def test_hash_format_and_genesis() -> None:
    chain, _ = make_chain()
    assert chain.block_hash(0) == FINNEY_GENESIS
    h = chain.block_hash(5)
    assert HASH.fullmatch(h)
    # recent blocks: the real Substrate hash of the header, parent linked
    assert h == header_hash(chain.header(5))
    assert chain.header(6)["parentHash"] == h


def test_deep_history_uses_the_seeded_stand_in() -> None:
    import hashlib

    from simnode.chain import LINKED_DEPTH, Chain, ChainConfig

    start = LINKED_DEPTH + 100
    chain = Chain(ChainConfig(seed="finney", genesis=FINNEY_GENESIS, start_height=start))
    assert chain.block_hash(50) == "0x" + hashlib.sha256(b"finney:50").hexdigest()
    top = start + 10
    assert chain.block_hash(top) == header_hash(chain.header(top))
    assert chain.header(top)["parentHash"] == chain.block_hash(top - 1)


def test_replicas_agree() -> None:
    a, ca = make_chain()
    b, cb = make_chain()
    ca.t = cb.t = EPOCH + 12 * 77
    assert a.best() == b.best() == 1077
    for n in (0, 1, 500, 1077):
        assert a.block_hash(n) == b.block_hash(n)
        assert a.header(n) == b.header(n)
        assert a.block(n) == b.block(n)


def test_forks_differ_from_block_one() -> None:
    a, _ = make_chain(seed="finney")
    b, _ = make_chain(seed="fork")
    assert a.block_hash(0) == b.block_hash(0)
    assert a.header(0) == b.header(0)
    for n in (1, 2, 1000):
        assert a.block_hash(n) != b.block_hash(n)
    # a fork's hash is unknown to the other chain
    assert a.number_of(b.block_hash(999)) is None


def test_custom_genesis() -> None:
    g = "0x" + "ab" * 32
    chain, _ = make_chain(genesis=g)
    assert chain.block_hash(0) == g
    assert chain.header(1)["parentHash"] == g


def test_header_and_block_shape() -> None:
    chain, _ = make_chain()
    h = chain.header(26)
    assert h["number"] == "0x1a"
    assert h["parentHash"] == chain.block_hash(25)
    assert HASH.fullmatch(h["stateRoot"]) and HASH.fullmatch(h["extrinsicsRoot"])
    assert h["digest"] == {"logs": []}
    assert chain.header(0)["parentHash"] == ZERO_HASH
    b = chain.block(26)
    assert b["justifications"] is None
    assert b["block"]["header"] == h
    assert len(b["block"]["extrinsics"]) == 2
    assert all(x.startswith("0x") for x in b["block"]["extrinsics"])


def test_number_of_resolves_known_and_rejects_future() -> None:
    chain, clock = make_chain()
    replica, _ = make_chain(clock=clock)
    # hashes learnt from a replica resolve without this node having served them
    assert chain.number_of(replica.block_hash(990)) == 990
    assert chain.number_of(replica.block_hash(1000).upper().replace("0X", "0x")) == 1000
    assert chain.number_of(FINNEY_GENESIS) == 0
    future = replica.block_hash(1001)
    assert chain.number_of(future) is None
    clock.t += 12
    assert chain.number_of(future) == 1001
    assert chain.number_of("0x" + "00" * 32) is None


@given(st.integers(min_value=0, max_value=1000))
def test_number_of_inverts_block_hash(n: int) -> None:
    chain, _ = make_chain()
    assert chain.number_of(chain.block_hash(n)) == n


# ---- pruning ---------------------------------------------------------------------------


def test_pruning_window() -> None:
    chain, _ = make_chain()
    best = chain.best()
    assert chain.state_available(best)
    assert chain.state_available(best - PRUNING_DEPTH + 1)
    assert not chain.state_available(best - PRUNING_DEPTH)
    assert not chain.state_available(0)
    archive, _ = make_chain(archive=True)
    assert archive.state_available(0)


# ---- chain-level faults --------------------------------------------------------------------


def test_lag() -> None:
    chain, _ = make_chain()
    chain.set_lag(5)
    assert chain.best() == 995
    assert chain.finalized() == 993
    assert chain.hash_at(995) is not None
    assert chain.hash_at(996) is None
    assert chain.number_of(chain.block_hash(996)) is None
    chain.set_lag(5000)
    assert chain.best() == 0
    with pytest.raises(ValueError):
        chain.set_lag(-1)


def test_freeze_and_resume() -> None:
    chain, clock = make_chain()
    chain.set_frozen(True)
    clock.t += 12 * 10
    assert chain.best() == 1000
    chain.set_frozen(True)  # re-freezing keeps the original height
    assert chain.best() == 1000
    chain.set_frozen(False)
    assert chain.best() == 1010


def test_genesis_override_and_reset() -> None:
    chain, _ = make_chain()
    wrong = "0x" + "11" * 32
    chain.set_genesis_override(wrong)
    assert chain.block_hash(0) == wrong
    assert chain.number_of(wrong) == 0
    assert chain.number_of(FINNEY_GENESIS) is None
    chain.set_lag(3)
    chain.set_frozen(True)
    chain.reset_faults()
    assert chain.block_hash(0) == FINNEY_GENESIS
    assert (chain.lag, chain.frozen, chain.genesis_override) == (0, False, None)
    with pytest.raises(ValueError):
        chain.set_genesis_override("nope")


# ---- dispatcher ---------------------------------------------------------------------------


def test_get_block_hash_param_forms() -> None:
    chain, _ = make_chain()
    d = Dispatcher(chain)
    best = chain.block_hash(1000)
    assert rpc(d, "chain_getBlockHash") == best
    assert rpc(d, "chain_getBlockHash", []) == best
    assert rpc(d, "chain_getBlockHash", [None]) == best
    assert rpc(d, "chain_getHead") == best
    assert rpc(d, "chain_getBlockHash", [26]) == chain.block_hash(26)
    assert rpc(d, "chain_getBlockHash", ["0x1a"]) == chain.block_hash(26)
    assert rpc(d, "chain_getBlockHash", {"number": 26}) == chain.block_hash(26)
    assert rpc(d, "chain_getBlockHash", [[1, "0x2", 3]]) == [
        chain.block_hash(1),
        chain.block_hash(2),
        chain.block_hash(3),
    ]
    assert rpc(d, "chain_getBlockHash", [0]) == FINNEY_GENESIS
    assert rpc(d, "chain_getBlockHash", [1001]) is None
    assert rpc(d, "chain_getBlockHash", [[999, 1001]]) == [chain.block_hash(999), None]
    for bad in ([-1], ["26"], ["0x"], ["0xzz"], [True], [{}], [1, 2], [[[1]]]):
        with pytest.raises(RpcError) as ei:
            rpc(d, "chain_getBlockHash", bad)
        assert ei.value.code == -32602, bad


def test_header_block_and_heads() -> None:
    chain, _ = make_chain()
    d = Dispatcher(chain)
    assert rpc(d, "chain_getHeader") == chain.header(1000)
    assert rpc(d, "chain_getHeader", [chain.block_hash(7)]) == chain.header(7)
    assert rpc(d, "chain_getHeader", ["0x" + "99" * 32]) is None
    assert rpc(d, "chain_getBlock", [chain.block_hash(7)]) == chain.block(7)
    assert rpc(d, "chain_getBlock", ["0x" + "99" * 32]) is None
    with pytest.raises(RpcError):
        rpc(d, "chain_getHeader", ["0x12"])
    assert rpc(d, "chain_getFinalizedHead") == chain.block_hash(998)
    assert rpc(d, "chain_getFinalisedHead") == chain.block_hash(998)
    assert rpc(d, "system_syncState") == {
        "startingBlock": 0,
        "currentBlock": 1000,
        "highestBlock": 1000,
    }


def test_constant_methods() -> None:
    chain, _ = make_chain(chain_name="Testnet")
    d = Dispatcher(chain)
    assert rpc(d, "system_chain") == "Testnet"
    assert rpc(d, "system_name") == "Subtensor Node"
    assert rpc(d, "system_version") == "4.0.0-dev-sim"
    assert rpc(d, "system_health") == {"peers": 8, "isSyncing": False, "shouldHavePeers": True}
    assert rpc(d, "system_properties") == {
        "ss58Format": 42,
        "tokenDecimals": 9,
        "tokenSymbol": "TAO",
    }
    methods = rpc(d, "rpc_methods")["methods"]
    assert methods == sorted(methods)
    assert {"chain_getHeader", "state_getStorage", "author_submitExtrinsic"} <= set(methods)
    rv = rpc(d, "state_getRuntimeVersion")
    assert rv["specName"] == "node-subtensor" and rv["specVersion"] == 300
    meta = rpc(d, "state_getMetadata")
    assert meta.startswith("0x") and 4096 <= len(meta) // 2 <= 8192
    assert meta == rpc(d, "state_getMetadata", [chain.block_hash(1000)])
    with pytest.raises(RpcError) as ei:
        rpc(d, "system_chain", [1])
    assert ei.value.code == -32602
    with pytest.raises(RpcError) as ei:
        rpc(d, "no_such_method")
    assert (ei.value.code, ei.value.message) == (-32601, "Method not found")


def test_storage_and_call() -> None:
    chain, _ = make_chain()
    d = Dispatcher(chain)
    v = rpc(d, "state_getStorage", ["0x1234"])
    assert HASH.fullmatch(v)
    assert rpc(d, "state_getStorageAt", ["0x1234", chain.block_hash(999)]) == v
    assert rpc(d, "state_getStorage", ["0x00ab"]) is None
    c = rpc(d, "state_call", ["Metadata_metadata_versions", "0x"])
    assert HASH.fullmatch(c)
    assert c != rpc(d, "state_call", ["Other", "0x"])
    for bad in ([], ["1234"], [1], ["0x123"]):
        with pytest.raises(RpcError) as ei:
            rpc(d, "state_getStorage", bad)
        assert ei.value.code == -32602


def test_state_pruning_and_unknown_block() -> None:
    chain, _ = make_chain()
    d = Dispatcher(chain)
    old = chain.block_hash(1000 - PRUNING_DEPTH)
    for method, params in (
        ("state_getStorage", ["0x1234", old]),
        ("state_call", ["X", "0x", old]),
        ("state_getRuntimeVersion", [old]),
    ):
        with pytest.raises(RpcError) as ei:
            rpc(d, method, params)
        assert ei.value.code == 4003
        assert f"State already discarded for {old}" in ei.value.message
    # headers of pruned blocks are still served
    assert rpc(d, "chain_getHeader", [old]) == chain.header(1000 - PRUNING_DEPTH)
    unknown = "0x" + "99" * 32
    with pytest.raises(RpcError) as ei:
        rpc(d, "state_getStorage", ["0x1234", unknown])
    assert ei.value.code == 4003
    assert "UnknownBlock: Header was not found in the database" in ei.value.message
    archive, _ = make_chain(archive=True)
    assert Dispatcher(archive).call("state_getStorage", ["0x1234", old]) == storage_of("0x1234")


def storage_of(key: str) -> str:
    import hashlib

    return "0x" + hashlib.sha256(key.encode()).hexdigest()


def test_submit_extrinsic_counts() -> None:
    chain, _ = make_chain()
    d = Dispatcher(chain)
    assert HASH.fullmatch(rpc(d, "author_submitExtrinsic", ["0x0102"]))
    assert d.submitted == 1


# ---- envelope ---------------------------------------------------------------------------


def respond(d: Dispatcher, body: Any) -> Any:
    raw = d.respond(parse(body if isinstance(body, bytes) else json.dumps(body).encode()))
    return json.loads(raw) if raw else None


def test_envelope_ids_and_errors() -> None:
    chain, _ = make_chain()
    d = Dispatcher(chain)
    for rid in (7, "abc", None, 1.5):
        out = respond(d, {"jsonrpc": "2.0", "id": rid, "method": "system_chain"})
        assert out == {"jsonrpc": "2.0", "id": rid, "result": "Bittensor"}
    assert respond(d, b"{nope")["error"]["code"] == -32700
    assert respond(d, [])["error"]["code"] == -32600
    assert respond(d, {"id": 1, "method": "system_chain"}) == {
        "jsonrpc": "2.0",
        "id": 1,
        "error": {"code": -32600, "message": "Invalid request"},
    }
    assert respond(d, {"jsonrpc": "2.0", "id": [1], "method": "x"})["id"] is None
    assert (
        respond(d, {"jsonrpc": "2.0", "id": 1, "method": "x", "params": 3})["error"]["code"]
        == -32600
    )
    # notification: no answer at all
    assert respond(d, {"jsonrpc": "2.0", "method": "system_chain"}) is None


def test_envelope_batch_order_and_fail_hook() -> None:
    chain, _ = make_chain()
    d = Dispatcher(chain)
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "system_chain"},
        {"jsonrpc": "2.0", "method": "system_chain"},
        5,
        {"jsonrpc": "2.0", "id": "x", "method": "nope"},
    ]
    out = respond(d, batch)
    assert [o["id"] for o in out] == [1, None, "x"]
    assert out[0]["result"] == "Bittensor"
    assert out[1]["error"]["code"] == -32600
    assert out[2]["error"]["code"] == -32601
    raw = d.respond(parse(json.dumps(batch[:1] * 3)), fail=lambda: True)
    assert [o["error"] for o in json.loads(raw)] == [
        {"code": -32603, "message": "Internal error"}
    ] * 3


def test_fork_gives_the_blocks_above_the_head_other_linked_hashes() -> None:
    chain, clock = make_chain()
    main, _ = make_chain()  # a replica that stays on the main chain
    clock.t += 12 * 3  # head 1003
    main._clock = clock
    chain.set_fork(True)
    clock.t += 12 * 5  # head 1008
    assert chain.best() == main.best() == 1008
    assert chain.block_hash(1003) == main.block_hash(1003)  # shared history
    for n in range(1004, 1009):
        assert chain.block_hash(n) != main.block_hash(n)
        header = chain.header(n)
        assert header["parentHash"] == chain.block_hash(n - 1)  # a chain of its own
        assert header_hash(header) == chain.block_hash(n)
    assert chain.number_of(main.block_hash(1006)) is None  # the other fork's block
    assert chain.number_of(chain.block_hash(1006)) == 1006
    forked = chain.block_hash(1006)
    chain.reset_faults()  # a reorg back to the main chain
    assert chain.block_hash(1006) == main.block_hash(1006)
    assert chain.number_of(forked) is None
