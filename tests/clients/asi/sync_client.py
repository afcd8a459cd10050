"""Run with the Python of ``.venv-asi`` by ``tests/clients/sync_runs.py``: one
async-substrate-interface client doing a metagraph-style sync on command.

    python sync_client.py WS_URL SOURCE_IP

It connects (``AsyncSubstrateInterface.initialize``: chain, head, runtime and
metadata), prints ``@@ {"step": "ready", ...}`` and then, for every stdin line
``sync N``, runs one sync and prints ``@@ {"step": "sync", ...}``; ``quit`` (or
the end of stdin) ends it. A sync is what a Bittensor metagraph sync does,
against the APIs this Asset Hub runtime has (no block hash anywhere, as
bittensor sends them when no block is given):

1. the head (``get_chain_head``: ``chain_getHead``), and right after it
   ``System.Number`` read raw (``rpc_request("state_getStorage", [key, None])``),
   as a client that took the head's hash and reads "the latest" does;
2. at once: three runtime-API calls (``Core_version``, ``AccountNonceApi_account_nonce``,
   ``AuraApi_authorities``) and three storage reads (``System.Number``,
   ``Timestamp.Now``, ``System.Account`` of Alice) through ``query``;
3. ``query_map("System", "Account")``: a ``state_getKeysPaged`` page and its
   ``state_queryStorageAt``.

The runtime-API calls send exactly what ``runtime_call`` sends
(``init_runtime`` for the head, then ``state_call [name, param hex, None]``),
but through ``rpc_request``: ``runtime_call`` looks the API up in metadata v15
(this runtime exports none) or in the client's legacy registry (Bittensor's
APIs only). The v14 fallback of ``initialize`` is taken on chopsticks' error
text too (``subs_client.allow_chopsticks_without_v15``).

Every JSON-RPC call the client sends is counted by method (a batch per call)
and every answer kept with its call, so the runner can check each one against
the node at the block the sync ran on.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from typing import Any

from async_substrate_interface.async_substrate import AsyncSubstrateInterface, Websocket
from client import bind_source
from subs_client import allow_chopsticks_without_v15

ALICE = "5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQY"
ALICE_HEX = "d43593c715fdd31c61141abd04a99fd6822c8558854ccde39a5684e7a56da27d"
SYSTEM_NUMBER = "0x26aa394eea5630e07c48ae0c9558cef702a5c1b19ab7a04f536c519aca4983ac"
# (api, method, SCALE-encoded params): the client sends ``param_data.hex()``, bare
# hex; chopsticks refuses bare hex with any content, so with the 0x a node accepts too
RUNTIME_CALLS = (
    ("Core", "version", "0x"),
    ("AccountNonceApi", "account_nonce", "0x" + ALICE_HEX),
    ("AuraApi", "authorities", "0x"),
)


class Wire:
    """What went over the client's socket: calls by method, and (call, answer)
    pairs, recorded by wrapping the client's own ``Websocket.send`` /
    ``send_batch`` / ``retrieve`` (nothing else of it is changed)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.answers: list[dict[str, Any]] = []
        self._sent: dict[str, dict[str, Any]] = {}

    def reset(self) -> None:
        self.calls = Counter()
        self.answers = []

    def install(self) -> None:
        send, send_batch, retrieve = Websocket.send, Websocket.send_batch, Websocket.retrieve
        wire = self

        async def counted_send(ws: Websocket, payload: dict[str, Any]) -> str:
            item = await send(ws, payload)
            wire.calls[payload["method"]] += 1
            wire._sent[item] = payload
            return item

        async def counted_batch(ws: Websocket, payloads: list[dict[str, Any]]) -> list[str]:
            items = await send_batch(ws, payloads)
            for item, payload in zip(items, payloads, strict=True):
                wire.calls[payload["method"]] += 1
                wire._sent[item] = payload
            return items

        async def kept_retrieve(ws: Websocket, item: str) -> Any:
            got = await retrieve(ws, item)
            payload = wire._sent.pop(item, None) if got is not None else None
            if payload is not None:
                answer = {k: got[k] for k in ("result", "error") if k in got}
                wire.answers.append(
                    {"method": payload["method"], "params": payload["params"], **answer}
                )
            return got

        Websocket.send = counted_send  # type: ignore[method-assign]
        Websocket.send_batch = counted_batch  # type: ignore[method-assign]
        Websocket.retrieve = kept_retrieve  # type: ignore[method-assign]


def emit(doc: dict[str, Any]) -> None:
    print("@@ " + json.dumps(doc, default=str), flush=True)


async def runtime_call(s: AsyncSubstrateInterface, api: str, method: str, data: str) -> Any:
    """The wire of ``runtime_call(api, method, params)`` without a block hash."""
    await s.init_runtime(block_hash=None)
    return (await s.rpc_request("state_call", [f"{api}_{method}", data, None]))["result"]


async def sync(s: AsyncSubstrateInterface) -> dict[str, Any]:
    head = await s.get_chain_head()
    latest = await s.rpc_request("state_getStorage", [SYSTEM_NUMBER, None])
    *_raw, number, now, alice = await asyncio.gather(
        *(runtime_call(s, *c) for c in RUNTIME_CALLS),
        s.query("System", "Number"),
        s.query("Timestamp", "Now"),
        s.query("System", "Account", [ALICE]),
    )
    accounts = [str(k) async for k, _ in await s.query_map("System", "Account")]
    return {
        "head": head,
        "latest": latest["result"],
        "number": number.value,
        "now": now.value,
        "alice_nonce": alice.value["nonce"],
        "accounts": len(accounts),
    }


async def main(url: str) -> None:
    wire = Wire()
    wire.install()
    allow_chopsticks_without_v15()
    s = AsyncSubstrateInterface(url)
    await s.initialize()
    # the runtime of the start-up head, loaded now rather than in the first sync
    await s.init_runtime(block_hash=s.startup_block_hash)
    emit({"step": "ready", "calls": dict(wire.calls)})
    loop = asyncio.get_running_loop()
    while line := (await loop.run_in_executor(None, sys.stdin.readline)).strip():
        if line == "quit":
            break
        wire.reset()
        started = time.perf_counter()
        try:
            # a hang guard, below the runner's (sync_runs.HANG_S): chopsticks runs
            # the runtime for one call at a time, so a sync on a loaded machine
            # takes what it takes
            out: dict[str, Any] = await asyncio.wait_for(sync(s), 500)
        except Exception as e:  # reported, not raised: the runner says what failed
            out = {"error": f"{type(e).__name__}: {e}"}
        seconds = time.perf_counter() - started
        emit(
            {
                "step": "sync",
                "n": line.split()[-1],
                "seconds": seconds,
                "calls": dict(wire.calls),
                "answers": wire.answers,
                **out,
            }
        )
    await s.close()


if __name__ == "__main__":
    bind_source(sys.argv[2])
    asyncio.run(main(sys.argv[1]))
    sys.exit(0)
