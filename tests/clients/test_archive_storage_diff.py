"""archive_v1_storageDiff through chainproxy over a real runtime (chopsticks,
which does not serve it itself): after a new block, the diff of the System
pallet's storage against the block's parent holds exactly the keys whose
values differ when each block is read directly from the node, with the
value each block has, and the block number among them."""

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


def _values(chain: ChainStack, at: str) -> dict[str, str]:
    """The System pallet's storage at ``at``, read from the node itself."""
    keys: list[str] = []
    while True:
        page = chain.node.rpc("state_getKeysPaged", [SYSTEM, 1000, keys[-1] if keys else None, at])
        keys += page
        if len(page) < 1000:
            break
    got = chain.node.rpc("state_queryStorageAt", [keys, at])
    return {k: v for change in got for k, v in change["changes"] if v is not None}


def test_a_diff_matches_both_blocks_read_from_the_node(both_endpoints: ChainStack) -> None:
    chain = both_endpoints
    height = chain.node.new_blocks(1)
    at = chain.node.rpc("chain_getBlockHash", [height])
    parent = chain.node.rpc("chain_getBlockHash", [height - 1])
    items = [{"key": SYSTEM, "returnType": "value"}]
    events = _diff(chain.ws_rpc_url, [at, items])
    assert events[-1] == {"event": "storageDiffDone"}, events[-1]
    now, then = _values(chain, at), _values(chain, parent)
    want = {}
    for key in sorted(set(now) | set(then)):
        if now.get(key) != then.get(key):
            kind = "added" if key not in then else "deleted" if key not in now else "modified"
            want[key] = {
                "event": "storageDiff",
                "key": key,
                "value": now.get(key, then.get(key)),
                "type": kind,
            }
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


def test_an_unknown_block_ends_the_diff_in_an_error_event(both_endpoints: ChainStack) -> None:
    events = _diff(
        both_endpoints.ws_rpc_url, ["0x" + "ee" * 32, [{"key": SYSTEM, "returnType": "value"}]]
    )
    assert len(events) == 1 and events[0]["event"] == "storageDiffError", events
