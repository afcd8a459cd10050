"""The RPC pipeline with mitmproxy's test flows and an in-process fake upstream: the
order of the steps, what each answers, the annotations mitmweb shows, and a step
that fails."""

from __future__ import annotations

import json
from typing import Any

from mitmproxy.test import tflow

from addon.addons import Guard
from addon.pipeline.context import META_KEY, SIDECAR_PATH_KEY
from addon.pipeline.runner import RpcPipeline
from addon.runtime import RuntimeHolder
from addon.upstream.forward import TransportError
from tests.addon.helpers import (
    A,
    B,
    body,
    call,
    make,
    rpc_flow,
    run,
)


async def test_success_is_annotated_for_mitmweb() -> None:
    stages, _fake, _ = make()
    f = await run(stages, rpc_flow(call("chain_getHeader", id_="q")))
    assert f.response.status_code == 200
    assert body(f) == {"jsonrpc": "2.0", "id": "q", "result": "chain_getHeader-ok"}
    assert f.response.headers["X-Cache"] == "MISS"
    assert f.response.headers["X-RateLimit-Remaining"] == "99"
    meta = f.metadata[META_KEY]
    assert meta["network"] == "finney" and meta["methods"] == ["chain_getHeader"]
    assert meta["upstream"].startswith("endpoint-srf-") and meta["attempts"][0]["reason"] == "ok"
    assert meta["outcome"] == "ok" and meta["cache"] == "MISS" and meta["failover"] is False
    assert "finney chain_getHeader" in f.comment and "MISS" in f.comment
    assert meta["provider"] in f.comment
    json.dumps(f.metadata)  # saved flows need plain data


async def test_failover_is_marked_and_listed() -> None:
    stages, fake, _ = make()
    fake.behaviour[A] = TransportError("connect-error")
    fake.behaviour[B] = "ok"
    marked = 0
    # Ties between the two are broken at random: 40 calls make missing A's
    # failure a 2**-40 event (6 calls failed about once in 50 runs).
    for i in range(40):
        f = await run(stages, rpc_flow(call("system_health", id_=i)))
        assert f.response.status_code == 200 and body(f)["result"] == "system_health-ok"
        meta = f.metadata[META_KEY]
        if meta["failover"]:
            marked += 1
            assert f.marked == ":repeat:"
            assert [a["reason"] for a in meta["attempts"]] == ["connect-error", "ok"]
            assert "2 attempts" in f.comment
    assert marked >= 1


async def test_refusals_answer_before_any_upstream_is_contacted() -> None:
    stages, fake, _ = make()
    cases = [
        (rpc_flow(b"nope"), 400, -32700),
        (rpc_flow(call("author_submitExtrinsic", ["0x"])), 403, -32601),
        (rpc_flow(call("system_health"), path="/rpc/v1/mars"), 404, -32601),
        (rpc_flow(call("system_health"), method="GET"), 405, -32600),
        (rpc_flow(b"[]"), 400, -32600),
    ]
    for flow, status, code in cases:
        await run(stages, flow)
        assert (flow.response.status_code, body(flow)["error"]["code"]) == (status, code)
    assert fake.seen == []


async def test_batch_forwards_only_allowed_calls_in_one_upstream_request() -> None:
    stages, fake, _ = make()
    f = await run(
        stages,
        rpc_flow(
            [call("system_chain", id_=1), call("author_x", id_=2), call("rpc_methods", id_=3)]
        ),
    )
    assert [a.get("result") for a in body(f)] == ["system_chain-ok", None, "rpc_methods-ok"]
    assert len(fake.seen) == 1
    sent = fake.seen[0][1]
    assert [c["method"] for c in sent] == ["system_chain", "rpc_methods"]
    assert [c["id"] for c in sent] == [0, 1]  # renumbered upstream


async def test_non_rpc_paths_are_left_for_the_sidecar_passthrough() -> None:
    stages, _fake, _ = make()
    f = tflow.tflow()
    f.request.path = "/api/v1/usage?network=finney"
    await run(stages[:1], f)
    assert f.response is None and f.metadata[SIDECAR_PATH_KEY] == "/api/v1/usage?network=finney"


async def test_connect_is_refused() -> None:
    stages, _, _ = make()
    f = tflow.tflow()
    f.request.method = "CONNECT"
    stages[0].http_connect(f)
    assert f.response.status_code == 405


async def test_a_failing_awaited_step_is_a_500_not_a_forwarded_flow() -> None:
    _, _, rt = make()
    holder = RuntimeHolder()
    holder.runtime = rt

    async def broken(rpc: Any, runtime: Any) -> None:
        raise RuntimeError("a bug")

    stages = [RpcPipeline(holder, steps=(broken,)), Guard()]
    f = await run(stages, rpc_flow(call("system_health")))
    assert f.response.status_code == 500
    assert body(f)["error"]["message"] == "internal proxy error"
