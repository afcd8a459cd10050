"""What the pipeline stores after an upstream answer: never an error or a null, and a
block hash only below finality."""

from __future__ import annotations

import json
from typing import Any

from tests.addon.helpers import (
    cached_stages,
    call,
    rpc_flow,
    run,
)

H2 = "0x" + "cd" * 32


async def test_errors_and_nulls_are_not_cached() -> None:
    stages, fake, _ = cached_stages()

    def null_answer(doc: Any) -> tuple[int, bytes]:
        return 200, json.dumps({"jsonrpc": "2.0", "id": doc["id"], "result": None}).encode()

    def error_answer(doc: Any) -> tuple[int, bytes]:
        err = {"code": -32602, "message": "Invalid params"}
        return 200, json.dumps({"jsonrpc": "2.0", "id": doc["id"], "error": err}).encode()

    for behaviour in (null_answer, error_answer):
        fake.behaviour = {u: behaviour for u in ("http://a.example:9944", "http://b.example:9944")}
        fake.seen.clear()
        for _ in range(2):
            f = await run(stages, rpc_flow(call("state_getStorage", ["0x01", H2])))
            assert f.response.headers["X-Cache"] == "MISS"
        assert len(fake.seen) == 2  # each call went upstream again


async def test_block_hash_is_cached_only_below_finality() -> None:
    stages, _, rt = cached_stages()
    await run(stages, rpc_flow(call("chain_getBlockHash", [50])))  # finality unknown
    f = await run(stages, rpc_flow(call("chain_getBlockHash", [50])))
    assert f.response.headers["X-Cache"] == "MISS"
    rt.chain.set_heights("finney", 120, 100)
    await run(stages, rpc_flow(call("chain_getBlockHash", [50])))
    f = await run(stages, rpc_flow(call("chain_getBlockHash", ["0x32"])))
    assert f.response.headers["X-Cache"] == "HIT"
    await run(stages, rpc_flow(call("chain_getBlockHash", [110])))
    f = await run(stages, rpc_flow(call("chain_getBlockHash", [110])))
    assert f.response.headers["X-Cache"] == "MISS"
