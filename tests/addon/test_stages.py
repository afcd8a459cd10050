"""The RPC pipeline with mitmproxy's test flows and an in-process fake upstream:
the order of stages, what each answers, and the annotations mitmweb shows."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mitmproxy.test import taddons, tflow

from addon.addons import Guard, build_addons
from addon.pipeline.context import META_KEY, SIDECAR_PATH_KEY
from addon.pipeline.runner import RpcPipeline
from addon.runtime import Runtime, RuntimeHolder
from addon.upstream.forward import TransportError
from common.config import parse_config

A = "http://a.example:9944"
B = "http://b.example:9944"


class FakeUpstreams:
    """Answers per URL: a callable(body) -> (status, bytes) or a TransportError."""

    def __init__(self) -> None:
        self.behaviour: dict[str, Any] = {}
        self.seen: list[tuple[str, Any]] = []

    async def post(self, url: str, body: bytes, timeout: float) -> tuple[int, bytes]:
        doc = json.loads(body)
        self.seen.append((url, doc))
        b = self.behaviour.get(url, "ok")
        if isinstance(b, TransportError):
            raise b
        if b == "ok":
            return 200, json.dumps(_answer(doc)).encode()
        return b(doc)


def _answer(doc: Any) -> Any:
    if isinstance(doc, list):
        return [_answer(d) for d in doc]
    return {"jsonrpc": "2.0", "id": doc["id"], "result": f"{doc['method']}-ok"}


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make(**proxy: Any) -> tuple[list[Any], FakeUpstreams, Runtime]:
    config = parse_config(
        {
            "proxy": {"networks": ["finney", "test"], **proxy},
            "registry": {
                "endpoints": [
                    {"url": A, "provider": "alpha", "kind": "node-rpc", "network": "finney"},
                    {"url": B, "provider": "beta", "kind": "node-rpc", "network": "finney"},
                ]
            },
        },
        env={},
    )
    holder = RuntimeHolder()
    rt = Runtime.build(config, clock=Clock())
    fake = FakeUpstreams()
    rt.transport = fake
    holder.runtime = rt
    stages = [RpcPipeline(holder), Guard()]
    return stages, fake, rt


def rpc_flow(body: Any, path: str = "/rpc/v1/finney", method: str = "POST") -> Any:
    f = tflow.tflow()
    f.request.method = method
    f.request.path = path
    f.request.content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return f


async def run(stages: list[Any], flow: Any) -> Any:
    for stage in stages:
        hook = getattr(stage, "request", None)
        if hook is not None:
            result = hook(flow)
            if result is not None:
                await result
    return flow


def body(flow: Any) -> Any:
    return json.loads(flow.response.content)


def call(method: str, params: Any = None, id_: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params or []}


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


async def test_rate_limited_flow_is_429_and_not_forwarded() -> None:
    stages, fake, _ = make(rate_limit={"requests": 2, "window_s": 60})
    for _ in range(2):
        await run(stages, rpc_flow(call("system_health")))
    f = await run(stages, rpc_flow(call("system_health", id_=3)))
    assert f.response.status_code == 429
    assert body(f)["error"]["data"]["retry_after"] == int(f.response.headers["Retry-After"])
    assert f.metadata[META_KEY]["outcome"] == "refused" and f.marked == ":no_entry:"
    assert len(fake.seen) == 2


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


async def test_guard_answers_a_flow_nobody_answered() -> None:
    f = tflow.tflow()
    Guard().request(f)
    assert f.response.status_code == 500 and body(f)["error"]["code"] == -32603


async def test_connect_is_refused() -> None:
    stages, _, _ = make()
    f = tflow.tflow()
    f.request.method = "CONNECT"
    stages[0].http_connect(f)
    assert f.response.status_code == 405


def test_settings_addon_loads_the_config_and_forces_lazy_connections(tmp_path: Any) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "registry:\n  endpoints:\n"
        "    - {url: 'http://127.0.0.1:1', provider: p, kind: node-rpc, network: finney}\n"
    )
    from mitmproxy.addons.proxyserver import Proxyserver

    addons = build_addons()
    with taddons.context(Proxyserver(), *addons) as tctx:
        tctx.configure(addons[0], chainproxy_config=str(cfg))
        rt = addons[0].holder.runtime
        assert rt is not None and len(rt.pools["finney"]) == 1
        assert tctx.options.connection_strategy == "lazy"
        # mitmproxy stops reading a body at the JSON-RPC limit (addon/mitm/limits.py)
        assert int(tctx.options.body_size_limit) == rt.config.proxy.max_body_bytes
        # A bad change later is refused and the last good config keeps serving.
        bad = tmp_path / "bad.yaml"
        bad.write_text("proxy: {max_batch: 0}\n")
        from mitmproxy import exceptions

        with pytest.raises(exceptions.OptionsError, match=r"proxy\.max_batch"):
            tctx.configure(addons[0], chainproxy_config=str(bad))
        assert addons[0].holder.runtime is rt


async def test_batch_larger_than_the_whole_quota_says_split_it() -> None:
    stages, fake, _ = make(rate_limit={"requests": 3, "window_s": 60})
    f = await run(stages, rpc_flow([call("system_health", id_=i) for i in range(5)]))
    assert f.response.status_code == 429
    assert "split it" in body(f)["error"]["data"]["reason"]
    assert fake.seen == []


def test_reloading_the_config_keeps_routing_and_quota_state(tmp_path: Any) -> None:
    from mitmproxy.addons.proxyserver import Proxyserver

    body_ = (
        "registry:\n  endpoints:\n"
        "    - {url: 'http://127.0.0.1:1', provider: p, kind: node-rpc, network: finney}\n"
    )
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(body_)
    second.write_text(body_ + "proxy: {max_batch: 50}\n")
    addons = build_addons()
    with taddons.context(Proxyserver(), *addons) as tctx:
        tctx.configure(addons[0], chainproxy_config=str(first))
        rt = addons[0].holder.runtime
        (up,) = rt.pools["finney"].upstreams.values()
        up.tier, up.best, up.ewma_ms = 1, 123, 42.0
        rt.chain.set_heights("finney", 130, 128)
        rt.limiter.check("1.2.3.4", 7)
        tctx.configure(addons[0], chainproxy_config=str(second))
        new = addons[0].holder.runtime
        assert new is not rt and new.config.proxy.max_batch == 50
        (up2,) = new.pools["finney"].upstreams.values()
        assert (up2.tier, up2.best, up2.ewma_ms) == (1, 123, 42.0)
        assert new.chain.tips["finney"] == 130 and new.chain.finalized["finney"] == 128
        assert new.limiter.check("1.2.3.4").remaining == 100 - 8
