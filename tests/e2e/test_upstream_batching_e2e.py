"""Upstream batching through the real mitmdump + addon to simulated nodes
(``addon/upstream/batching.py``): a client's burst of single storage reads
over one WebSocket reaches a node as JSON-RPC batches, each call answered
with the node's own value for it, none lost or doubled; another client's
reads of the same turn are never in its batches; with batching off, each
read goes alone."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import pytest

from tests.e2e.harness import Stack
from tests.e2e.helpers import build_stack, call, next_client_ip

pytestmark = pytest.mark.e2e

READS = 24


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Any:
    s = build_stack(tmp_path_factory.mktemp("batching"), ("alpha", "beta"))
    yield s
    s.stop()


async def _burst(stack: Stack, keys: list[str], at: str) -> list[dict[str, Any]]:
    """``keys`` read at block ``at`` over one socket, all sent before any answer."""
    url = stack.rpc_url().replace("http://", "ws://")
    connector = aiohttp.TCPConnector(local_addr=(next_client_ip(), 0))
    async with aiohttp.ClientSession(connector=connector) as s:
        async with s.ws_connect(url, timeout=aiohttp.ClientWSTimeout(10)) as ws:
            frames = [
                json.dumps(call("state_getStorage", [k, at], id_=i)) for i, k in enumerate(keys)
            ]
            for f in frames:
                await ws.send_str(f)
            got: dict[int, dict[str, Any]] = {}
            while len(got) < len(keys):
                msg = await asyncio.wait_for(ws.receive(), 15)
                assert msg.type == aiohttp.WSMsgType.TEXT, msg
                doc = json.loads(msg.data)
                got[doc["id"]] = doc
    return [got[i] for i in range(len(keys))]


def _storage_arrivals(stack: Stack, since: float) -> list[dict[str, Any]]:
    return [
        a
        for n in stack.nodes
        for a in n.arrivals(since)
        if a["agent"] == "chainproxy" and "state_getStorage" in a["methods"]
    ]


async def test_a_burst_of_reads_goes_up_in_batches_each_answered_its_own(stack: Stack) -> None:
    alpha = stack.nodes[0]
    at = alpha.rpc("chain_getBlockHash", [alpha.state()["best"] - 2])["result"]
    keys = [f"0x{time.time_ns():016x}{i:04x}" for i in range(READS)]
    since = time.time()
    answers = await _burst(stack, keys, at)
    direct = [alpha.rpc("state_getStorage", [k, at]) for k in keys]
    assert [a.get("result") for a in answers] == [d.get("result") for d in direct]
    assert all("error" not in a for a in answers), answers
    arrived = _storage_arrivals(stack, since)
    calls = sum(a["methods"].count("state_getStorage") for a in arrived)
    # each read once (a hedge may race a slow one on the other node: at most a few more)
    assert READS <= calls <= READS + 4, arrived
    batches = [a for a in arrived if a["calls"] > 1]
    assert batches, arrived  # the burst went up as batches, not 24 requests
    assert len(arrived) < READS / 2, arrived
    assert all(set(a["methods"]) == {"state_getStorage"} for a in batches)


async def test_two_clients_reads_are_never_in_one_batch(stack: Stack) -> None:
    alpha = stack.nodes[0]
    at = alpha.rpc("chain_getBlockHash", [alpha.state()["best"] - 2])["result"]
    mine = [f"0x{time.time_ns():016x}aa{i:04x}" for i in range(8)]
    theirs = [f"0x{time.time_ns():016x}bb{i:04x}" for i in range(8)]
    since = time.time()
    a, b = await asyncio.gather(_burst(stack, mine, at), _burst(stack, theirs, at))
    assert all("result" in x for x in a + b)
    for arrival in _storage_arrivals(stack, since):
        assert arrival["calls"] <= 8  # never one client's reads beside the other's
