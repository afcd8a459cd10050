"""archive_v1_storageDiff through chainproxy over a real runtime (chopsticks,
which does not serve it itself): after a new block, the diff of the System
pallet's storage against the block's parent holds exactly the keys whose
values differ when each block is read directly from the node, with the
value each block has, and the block number among them; a whole-trie diff
over several pages of keys.

An unknown block is not asked here: chopsticks answers a hash it does not
know with its genesis and files it under that hash, which would change the
session's chain for every other test (``chain_getBlockHash(0)``). The unit
tests cover it (``tests/addon/newspec/test_storage_diff.py``)."""

from __future__ import annotations

import json
import socket
from typing import Any
from urllib.parse import urlsplit

import websocket

from tests.clients.chopsticks_stack import ChainStack
from tests.e2e.helpers import next_client_ip

SYSTEM = "0x26aa394eea5630e07c48ae0c9558cef7"  # twox128("System")
NUMBER = SYSTEM + "02a5c1b19ab7a04f536c519aca4983ac"  # System.Number


def _socket(url: str) -> websocket.WebSocket:
    parts = urlsplit(url)
    sock = socket.create_connection(
        (parts.hostname, parts.port or 80), timeout=60, source_address=(next_client_ip(), 0)
    )
    return websocket.create_connection(url, socket=sock, timeout=60)


def _diff(url: str, params: list[Any]) -> list[dict[str, Any]]:
    """One storageDiff operation to its end: its events, the last one ending it."""
    ws = _socket(url)
    try:
        ws.send(
            json.dumps(
                {"jsonrpc": "2.0", "id": 1, "method": "archive_v1_storageDiff", "params": params}
            )
        )
        answer = json.loads(ws.recv())
        op_id = answer["result"]
        events = []
        while True:
            note = json.loads(ws.recv())
            assert note["method"] == "archive_v1_storageDiffEvent", note
            assert note["params"]["subscription"] == op_id
            events.append(note["params"]["result"])
            if events[-1]["event"] != "storageDiff":
                return events
    finally:
        ws.close()


def _values(chain: ChainStack, at: str, prefix: str = SYSTEM) -> dict[str, str]:
    """The storage under ``prefix`` at ``at``, read from the node itself."""
    keys: list[str] = []
    while True:
        page = chain.node.rpc("state_getKeysPaged", [prefix, 1000, keys[-1] if keys else None, at])
        keys += page
        if len(page) < 1000:
            break
    out = {}
    for n in range(0, len(keys), 1000):
        got = chain.node.rpc("state_queryStorageAt", [keys[n : n + 1000], at])
        out.update({k: v for change in got for k, v in change["changes"] if v is not None})
    return out


def _expected(now: dict[str, str], then: dict[str, str]) -> dict[str, dict[str, str]]:
    want = {}
    for key in sorted(set(now) | set(then)):
        if now.get(key) != then.get(key):
            kind = "added" if key not in then else "deleted" if key not in now else "modified"
            value = now.get(key, then.get(key))
            want[key] = {"event": "storageDiff", "key": key, "value": value, "type": kind}
    return want


def test_a_diff_matches_both_blocks_read_from_the_node(both_endpoints: ChainStack) -> None:
    chain = both_endpoints
    height = chain.node.new_blocks(1)
    at = chain.node.rpc("chain_getBlockHash", [height])
    parent = chain.node.rpc("chain_getBlockHash", [height - 1])
    items = [{"key": SYSTEM, "returnType": "value"}]
    events = _diff(chain.ws_rpc_url, [at, items])
    assert events[-1] == {"event": "storageDiffDone"}, events[-1]
    want = _expected(_values(chain, at), _values(chain, parent))
    got = {e["key"]: e for e in events[:-1]}
    assert len(got) == len(events) - 1  # each key once
    assert got == want
    number = (height).to_bytes(4, "little").hex()
    assert got[NUMBER] == {
        "event": "storageDiff",
        "key": NUMBER,
        "value": "0x" + number,
        "type": "modified",
    }
    # previousHash given as the parent, and hashes asked: the same keys
    hashed = _diff(chain.ws_rpc_url, [at, [{"key": SYSTEM, "returnType": "hash"}], parent])
    assert [e["key"] for e in hashed[:-1]] == list(want)
    assert all(set(e) == {"event", "key", "hash", "type"} for e in hashed[:-1])


def test_a_whole_trie_diff_pages_through_every_key(both_endpoints: ChainStack) -> None:
    """No items: every key of the trie at both blocks, a page of 100 at a
    time; 250 keys written between them (``dev_setStorage``) make it pages."""
    chain = both_endpoints
    before = chain.node.rpc("chain_getBlockHash", [chain.node.best() - 1])
    mine = [("0xfeed" + f"{i:04x}", "0x" + f"{i:04x}") for i in range(250)]
    chain.node.rpc("dev_setStorage", [[list(pair) for pair in mine]])
    at = chain.node.rpc("chain_getBlockHash", [chain.node.new_blocks(1)])
    now = _values(chain, at, "0x")
    assert len(now) > 300  # pages of 100 on each side
    events = _diff(chain.ws_rpc_url, [at, None, before])
    assert events[-1] == {"event": "storageDiffDone"}, events[-1]
    got = {e["key"]: e for e in events[:-1]}
    assert got == _expected(now, _values(chain, before, "0x"))
    assert all(
        got[k] == {"event": "storageDiff", "key": k, "value": v, "type": "added"} for k, v in mine
    )
