"""The RPC pipeline with mitmproxy's test flows and an in-process fake upstream: the
order of the steps, what each answers, the annotations mitmweb shows, a step
that fails, and a step that waits on a reply read by callback (``Later``)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from mitmproxy.test import tflow

from addon.addons import Guard
from addon.hooks.holder import RuntimeHolder
from addon.hooks.pipeline import RpcPipeline
from addon.pipeline.context import META_KEY, SIDECAR_PATH_KEY
from addon.rpc.later import Later
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
            [call("system_chain", id_=1), call("author_x", id_=2), call("system_name", id_=3)]
        ),
    )
    assert [a.get("result") for a in body(f)] == ["system_chain-ok", None, "system_name-ok"]
    assert len(fake.seen) == 1
    sent = fake.seen[0][1]
    assert [c["method"] for c in sent] == ["system_chain", "system_name"]
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


# -- a step that waits on a reply read by callback (the shared quota) ----------------------


def _pipeline(*steps: Any) -> list[Any]:
    _, _, rt = make()
    holder = RuntimeHolder()
    holder.runtime = rt
    return [RpcPipeline(holder, steps=steps), Guard()]


async def test_the_run_goes_on_from_the_callback_and_one_await_ends_it() -> None:
    later: Later[None] = Later()
    order: list[str] = []

    def waits(rpc: Any, rt: Any) -> Later[None]:
        later.then(lambda done: order.append("applied"))
        return later

    def after(rpc: Any, rt: Any) -> None:
        order.append("next step")

    async def forward(rpc: Any, rt: Any) -> None:
        order.append("forwarded")
        rpc.refuse(418, {"jsonrpc": "2.0", "id": 1, "result": "done"})

    pipe = _pipeline(waits, after, forward)
    f = rpc_flow(call("system_health"))
    pending = pipe[0].request(f)
    assert pending is not None and order == []

    def resolve() -> None:
        later.resolve(None)
        order.append("resolved")  # the steps ran inside the resolve: no task woke for them

    asyncio.get_running_loop().call_soon(resolve)
    await pending  # one await: the callback, the next steps and the forward
    assert order == ["applied", "next step", "resolved", "forwarded"]
    assert f.response.status_code == 418


async def test_a_later_already_resolved_goes_on_at_once() -> None:
    def done_now(rpc: Any, rt: Any) -> Later[None]:
        later: Later[None] = Later()
        later.resolve(None)
        return later

    def answer(rpc: Any, rt: Any) -> None:
        rpc.refuse(418, {"jsonrpc": "2.0", "id": 1, "result": "sync"})

    pipe = _pipeline(done_now, answer)
    f = rpc_flow(call("system_health"))
    assert pipe[0].request(f) is None  # nothing to await: answered in the hook
    assert f.response.status_code == 418


async def test_a_failing_callback_is_a_500() -> None:
    later: Later[None] = Later()

    def waits(rpc: Any, rt: Any) -> Later[None]:
        later.then(lambda done: 1 / 0)  # the step's own apply has a bug
        return later

    pipe = _pipeline(waits)
    f = rpc_flow(call("system_health"))
    pending = pipe[0].request(f)
    asyncio.get_running_loop().call_soon(later.resolve, None)
    await pending
    assert f.response.status_code == 500
    assert body(f)["error"]["message"] == "internal proxy error"


async def test_route_refusals_carry_a_request_id() -> None:
    """An unknown network (404) or a GET (405) is answered before any call
    exists; its answer still has the id a complaint quotes, and it is counted
    as a refusal of the request (a client pointed at a wrong URL shows on
    ``/metrics``; it was in no counter)."""
    stages, _, rt = make()
    for method, path, status in (
        ("POST", "/rpc/v1/finny", 404),
        ("GET", "/rpc/v1/finney", 405),
    ):
        f = rpc_flow(call("system_health"))
        f.request.method, f.request.path = method, path
        await run(stages[:1], f)
        assert f.response.status_code == status
        assert len(f.response.headers["X-Request-Id"]) == 16
        mine = rpc_flow(call("system_health"))
        mine.request.method, mine.request.path = method, path
        mine.request.headers["X-Request-Id"] = "complaint-7"
        await run(stages[:1], mine)
        assert mine.response.headers["X-Request-Id"] == "complaint-7"
    refused = rt.metrics._extra[("chainproxy_refusals_total", (("policy", "request"),))]
    assert refused == 4


async def test_an_api_key_off_the_rpc_routes_is_dropped_all_the_same() -> None:
    """A mistyped network (404) or a dashboard path: the key in the query or
    the header is neither logged with the flow nor passed to the sidecar."""
    stages, _, _ = make()
    for path in ("/rpc/v1/finny?api_key=sekrit-1&x=1", "/api/v1/usage?api_key=sekrit-1&x=1"):
        f = rpc_flow(call("system_health"))
        f.request.path = path
        f.request.headers["X-Api-Key"] = "sekrit-2"
        await run(stages[:1], f)
        assert f.request.path == path.replace("api_key=sekrit-1&", ""), path
        assert "X-Api-Key" not in f.request.headers
        sidecar = f.metadata.get(SIDECAR_PATH_KEY)
        assert sidecar is None or "sekrit" not in sidecar
