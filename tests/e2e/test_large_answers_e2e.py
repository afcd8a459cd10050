"""A large answer (~1 MiB, ``get_all_metagraphs``) through the real mitmdump +
addon: over HTTP and WebSocket, a miss and then a hit, each the node's own
result byte for byte with the caller's id (the result is spliced, not parsed
and encoded again; the cache entry written by a thread, read back unparsed)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from simnode.remote import http_json
from tests.e2e.harness import Stack
from tests.e2e.helpers import call, next_client_ip, post

pytestmark = pytest.mark.e2e

API = "SubnetInfoRuntimeApi_get_all_metagraphs"


def direct(stack: Stack, params: list[Any]) -> Any:
    """The archive node's own answer (it keeps the state of every block)."""
    doc = {"jsonrpc": "2.0", "id": 1, "method": "state_call", "params": params}
    return http_json(stack.nodes[2].url, doc)["result"]


async def test_a_large_answer_over_http_then_from_the_cache(stack: Stack) -> None:
    head = (await post(stack.rpc_url(), call("chain_getBlockHash", [3]))).body["result"]
    params = [API, "0x0a", head]
    want = direct(stack, params)
    assert isinstance(want, str) and len(want) > 1 << 20  # over the scanner's floor
    first = await post(stack.rpc_url(), call("state_call", params, id_="big-1"))
    assert first.status == 200, first.raw[:300]
    assert first.body == {"jsonrpc": "2.0", "id": "big-1", "result": want}
    assert json.dumps(want).encode() in first.raw  # the node's text, verbatim
    second = await post(stack.rpc_url(), call("state_call", params, id_=2**70))
    assert second.headers["X-Cache"] == "HIT"
    assert second.body == {"jsonrpc": "2.0", "id": 2**70, "result": want}
    # a batch with the same call: answered from the same entry
    batch = await post(stack.rpc_url(), [call("state_call", params, id_=5), call("system_chain")])
    assert batch.body[0] == {"jsonrpc": "2.0", "id": 5, "result": want}


async def test_a_large_answer_over_websocket(stack: Stack) -> None:
    head = (await post(stack.rpc_url(), call("chain_getBlockHash", [4]))).body["result"]
    params = [API, "0x0b", head]
    want = direct(stack, params)
    url = stack.rpc_url().replace("http://", "ws://")
    connector = aiohttp.TCPConnector(local_addr=(next_client_ip(), 0))
    async with aiohttp.ClientSession(connector=connector) as s:
        async with s.ws_connect(url, max_msg_size=8 << 20) as ws:
            for id_ in ("miss", "hit"):
                await ws.send_str(json.dumps(call("state_call", params, id_=id_)))
                msg = await asyncio.wait_for(ws.receive(), 20)
                assert msg.type == aiohttp.WSMsgType.TEXT, msg
                assert json.loads(msg.data) == {"jsonrpc": "2.0", "id": id_, "result": want}
