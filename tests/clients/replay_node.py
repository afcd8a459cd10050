"""A node that answers from recorded finney traffic: the bittensor SDK's own
test recording (``tests/clients/recordings/``, README.md there), served over
JSON-RPC on HTTP and WebSocket on one port, so chainproxy can use it as a
node-rpc and a node-wss upstream.

    python -m tests.clients.replay_node --port 9944 [--head-seed metagraph]

How a request is answered (``Recording.answer``, pure):

* From the recording, matched by method and params (ids ignored). Substrate's
  aliases are one method (``state_getStorageAt`` is ``state_getStorage``...),
  a trailing ``null`` block argument is the same as none, 0x-hex is compared
  in lower case and a runtime call's argument bytes with or without 0x.
* The recording is several SDK tests ("seeds"), each at its own head. Reads
  pinned to a block hash are the same chain in every seed and are merged.
  Reads without a block are kept for one seed, the *head seed*: its head is
  this node's best and finalized block. Another seed's hash-less reads are
  filed under its own head hash (they were answered there).
* Answers the recording implies: ``chain_getBlockHash [n]`` and
  ``chain_getHeader [hash]`` for every recorded header, a block's runtime
  version from its seed when that exact request was not recorded, the
  metadata (recorded apart, as the SDK's fake websocket serves it) at any
  block, finney's genesis hash for block 0, and fixed ``system_health`` /
  ``system_chain`` answers. Anything else
  is an error ``-32000 not in the recording`` and is counted (``GET
  /replay/stats``: what was served and what was missed).
* Head subscriptions get one notification (the head header); the runtime
  version subscription its version.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web

from common.config.model import FINNEY_GENESIS

DATA = Path(__file__).parent / "recordings"
RECORDING = DATA / "finney_recording.json"
METADATA = DATA / "finney_metadata.json"
HEAD_SEED = "metagraph"
MISSING = -32000

log = logging.getLogger("replay_node")

# Substrate's aliases (sc-rpc): one method under several names
ALIASES = {
    "state_getStorageAt": "state_getStorage",
    "state_getKeysPagedAt": "state_getKeysPaged",
    "state_callAt": "state_call",
    "chain_getHead": "chain_getBlockHash",
    "chain_getFinalisedHead": "chain_getFinalizedHead",
    "chain_getRuntimeVersion": "state_getRuntimeVersion",
    "state_getStorageHashAt": "state_getStorageHash",
    "state_getStorageSizeAt": "state_getStorageSize",
}
# where the block argument sits in each method's params
BLOCK_ARG = {
    "state_getStorage": 1,
    "state_getStorageHash": 1,
    "state_getStorageSize": 1,
    "state_call": 2,
    "state_getKeysPaged": 3,
    "state_getKeys": 1,
    "state_queryStorageAt": 1,
    "state_getRuntimeVersion": 0,
    "state_getMetadata": 0,
    "chain_getHeader": 0,
    "chain_getBlock": 0,
    "chain_getBlockHash": 0,
}
HEAD_SUBSCRIPTIONS = {
    "chain_subscribeNewHeads": "chain_newHead",
    "chain_subscribeNewHead": "chain_newHead",
    "chain_subscribeAllHeads": "chain_allHead",
    "chain_subscribeFinalizedHeads": "chain_finalizedHead",
    "chain_subscribeFinalisedHeads": "chain_finalizedHead",
}
RUNTIME_SUBSCRIPTIONS = {
    "state_subscribeRuntimeVersion": "state_runtimeVersion",
    "chain_subscribeRuntimeVersion": "state_runtimeVersion",
}
HEALTH = {"peers": 40, "isSyncing": False, "shouldHavePeers": True}


def _lower(value: Any) -> Any:
    if isinstance(value, str) and value.startswith("0x"):
        return value.lower()
    if isinstance(value, list):
        return [_lower(v) for v in value]
    return value


def request_key(method: str, params: Any) -> tuple[str, str]:
    """(method, params) as the recording is matched: aliases merged, trailing
    nulls dropped, hex in lower case."""
    method = ALIASES.get(method, method)
    args = list(params) if isinstance(params, list) else []
    while args and args[-1] is None:
        args.pop()
    if method == "state_call" and len(args) > 1 and isinstance(args[1], str):
        args[1] = args[1].removeprefix("0x")  # Substrate's Bytes: the 0x is optional
    return method, json.dumps(_lower(args))


def _pinned(method: str, params: list[Any], head: str) -> list[Any]:
    """``params`` with the block argument set to ``head`` when it is missing."""
    at = BLOCK_ARG.get(method)
    if at is None or method == "chain_getBlockHash":
        return params
    args = list(params)
    while args and args[-1] is None:
        args.pop()
    if len(args) > at:
        return args
    return args + [None] * (at - len(args)) + [head]


def _unpinned(method: str, params: list[Any], head: str | None) -> list[Any]:
    """``params`` without the block argument when it is ``head``."""
    at = BLOCK_ARG.get(method)
    if at is None or method == "chain_getBlockHash" or len(params) != at + 1:
        return params
    return params[:at] if params[at] == head else params


@dataclass
class Recording:
    """The recorded answers and the chain facts they imply (no I/O)."""

    head: str
    answers: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    headers: dict[str, dict[str, Any]] = field(default_factory=dict)
    hashes: dict[int, str] = field(default_factory=dict)
    versions: dict[str, dict[str, Any]] = field(default_factory=dict)  # block -> version
    metadata: str = ""
    metadata_v15: str = ""
    conflicts: list[str] = field(default_factory=list)

    @classmethod
    def load(
        cls, recording: dict[str, Any], metadata: dict[str, Any], head_seed: str = HEAD_SEED
    ) -> Recording:
        seeds = recording["seeds"]
        heads = {seed: _seed_head(table) for seed, table in seeds.items()}
        rec = cls(head=heads[head_seed])
        rec.metadata = metadata["results"].get("state_getMetadata", "")
        rec.metadata_v15 = metadata["results"]["Metadata_metadata_at_version"]
        # the head seed last: its hash-less reads are the node's own
        for seed in sorted(seeds, key=lambda s: s == head_seed):
            rec._add_seed(seeds[seed], heads[seed], own_head=seed == head_seed)
        return rec

    def _add_seed(self, table: dict[str, Any], head: str | None, *, own_head: bool) -> None:
        seed_version: dict[str, Any] | None = None
        blocks: list[str] = []
        for method, by_params in table.items():
            for raw_params, response in by_params.items():
                params = json.loads(raw_params)
                name, key = request_key(method, params)
                if name == "chain_getHeader" and isinstance(response.get("result"), dict):
                    header = response["result"]
                    block = _lower(params[0]) if params and params[0] else head
                    if block is not None:
                        self._add_header(block, header)
                        blocks.append(block)
                if name == "state_getRuntimeVersion" and isinstance(response.get("result"), dict):
                    seed_version = response["result"]
                args = json.loads(key)
                pinned = _pinned(name, args, head) if head is not None else args
                hashless = pinned != args or (name == "chain_getBlockHash" and not args)
                if head is None and name in BLOCK_ARG and not own_head:
                    continue  # a read at a block the recording does not say
                if own_head or not hashless:
                    self._put((name, key), response, own_head)
                if pinned != args:
                    self._put((name, json.dumps(pinned)), response, own_head)
                elif own_head and _unpinned(name, args, head) != args:
                    self._put((name, json.dumps(_unpinned(name, args, head))), response, True)
        if seed_version is not None:
            for block in blocks:
                self.versions.setdefault(block, seed_version)

    def _put(self, key: tuple[str, str], response: dict[str, Any], replace: bool) -> None:
        doc = {k: v for k, v in response.items() if k in ("result", "error")}
        old = self.answers.get(key)
        if old is not None and old != doc:
            self.conflicts.append(f"{key[0]} {key[1][:80]}")
            if not replace:
                return
        self.answers[key] = doc

    def _add_header(self, block: str, header: dict[str, Any]) -> None:
        self.headers[block] = header
        self.hashes[int(header["number"], 16)] = block

    def answer(self, method: str, params: Any) -> dict[str, Any] | None:
        """``{"result": ...}`` or ``{"error": ...}``; None when not in the recording."""
        name, key = request_key(method, params)
        args = json.loads(key)
        if name == "state_getMetadata" and self.metadata:
            return {"result": self.metadata}
        if name == "state_call" and args and args[0] == "Metadata_metadata_at_version":
            if len(args) > 1 and args[1] == "0f000000":
                return {"result": self.metadata_v15}
            return {"result": "0x00"}  # None: only v15 was recorded
        if name == "state_call" and args and args[0] == "Metadata_metadata_versions":
            return {"result": "0x080e0000000f000000"}  # [14, 15]
        recorded = self.answers.get((name, key))
        if recorded is not None:
            return recorded
        if name in ("chain_getBlockHash", "chain_getFinalizedHead") and not args:
            return {"result": self.head}
        if name == "chain_getBlockHash" and args[0] == 0:
            return {"result": FINNEY_GENESIS}
        if name == "chain_getBlockHash" and isinstance(args[0], int):
            # a height the recording has no hash for is not in it (``null`` would
            # say "never had that block": a warp-synced node, state horizons)
            block = self.hashes.get(args[0])
            return {"result": block} if block is not None else None
        if name == "chain_getHeader":
            header = self.headers.get(args[0] if args else self.head)
            return {"result": header} if header is not None else None
        if name == "state_getRuntimeVersion":
            version = self.versions.get(args[0] if args else self.head)
            return {"result": version} if version is not None else None
        if name == "system_health":
            return {"result": HEALTH}
        if name == "system_chain":
            return {"result": "Bittensor"}
        return None


def _seed_head(table: dict[str, Any]) -> str | None:
    for method in ("chain_getHead", "chain_getBlockHash"):
        for params in ("[]", "[null]"):
            got = table.get(method, {}).get(params)
            if got is not None and isinstance(got.get("result"), str):
                return got["result"].lower()
    return None


# ---- the server ---------------------------------------------------------------------------

STATS = web.AppKey("stats", dict)
REC = web.AppKey("recording", Recording)


def _reply(app: web.Application, doc: Any) -> dict[str, Any]:
    if not isinstance(doc, dict) or not isinstance(doc.get("method"), str):
        return {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "bad request"}}
    method, params = doc["method"], doc.get("params", [])
    stats = app[STATS]
    got = app[REC].answer(method, params)
    if got is None:
        stats["missed"][f"{method} {json.dumps(params)[:200]}"] += 1
        got = {"error": {"code": MISSING, "message": f"not in the recording: {method}"}}
    else:
        stats["served"][method] += 1
    return {"jsonrpc": "2.0", "id": doc.get("id"), **got}


async def rpc(request: web.Request) -> web.StreamResponse:
    if request.headers.get("Upgrade", "").lower() == "websocket":
        return await websocket(request)
    if request.method != "POST":
        return web.Response(text="replay node: POST JSON-RPC or open a WebSocket\n")
    try:
        doc = await request.json()
    except ValueError:
        return web.json_response({"jsonrpc": "2.0", "id": None, "error": {"code": -32700}})
    app = request.app
    if isinstance(doc, list):
        return web.json_response([_reply(app, d) for d in doc])
    return web.json_response(_reply(app, doc))


async def websocket(request: web.Request) -> web.WebSocketResponse:
    ws = web.WebSocketResponse(max_msg_size=64 * 1024 * 1024)
    await ws.prepare(request)
    app = request.app
    ids = itertools.count(1)
    async for msg in ws:
        if msg.type != WSMsgType.TEXT:
            break
        try:
            doc = json.loads(msg.data)
        except ValueError:
            continue
        for d in doc if isinstance(doc, list) else [doc]:
            await _ws_one(ws, app, d, ids)
    return ws


async def _ws_one(ws: web.WebSocketResponse, app: web.Application, doc: Any, ids: Any) -> None:
    method = doc.get("method") if isinstance(doc, dict) else None
    note = HEAD_SUBSCRIPTIONS.get(method) or RUNTIME_SUBSCRIPTIONS.get(method)
    if note is None:
        if isinstance(method, str) and "_unsubscribe" in method:
            await ws.send_json({"jsonrpc": "2.0", "id": doc.get("id"), "result": True})
            return
        await ws.send_json(_reply(app, doc))
        return
    rec = app[REC]
    sub = f"replay{next(ids)}"
    app[STATS]["served"][method] += 1
    await ws.send_json({"jsonrpc": "2.0", "id": doc.get("id"), "result": sub})
    if method in HEAD_SUBSCRIPTIONS:
        value = rec.headers.get(rec.head)
    else:
        value = rec.versions.get(rec.head)
    if value is not None:
        params = {"subscription": sub, "result": value}
        await ws.send_json({"jsonrpc": "2.0", "method": note, "params": params})


async def stats(request: web.Request) -> web.Response:
    s = request.app[STATS]
    return web.json_response({"served": dict(s["served"]), "missed": dict(s["missed"])})


def create_app(recording: Recording) -> web.Application:
    app = web.Application(client_max_size=16 * 1024 * 1024)
    app[REC] = recording
    app[STATS] = {"served": Counter(), "missed": Counter()}
    app.router.add_get("/replay/stats", stats)
    app.router.add_route("*", "/{tail:.*}", rpc)
    return app


def load(head_seed: str = HEAD_SEED) -> Recording:
    return Recording.load(
        json.loads(RECORDING.read_text()), json.loads(METADATA.read_text()), head_seed
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--head-seed", default=HEAD_SEED)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    recording = load(args.head_seed)
    log.info(
        "replay node: %d answers, head %s, %d conflicts",
        len(recording.answers),
        recording.head,
        len(recording.conflicts),
    )
    web.run_app(create_app(recording), host=args.host, port=args.port, print=None)


if __name__ == "__main__":
    main()
