"""What several test files under tests/addon use: the RPC pipeline wired to an
in-process fake upstream (``make``, ``rpc_flow``, ``run``, ``call``, ``body``),
stand-ins for the subscription hub and a client socket, a Redis link to a
test redis-server, and usage records."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from aiohttp import WSMsgType, web
from mitmproxy.test import tflow

from addon.addons import Guard
from addon.cache.memory_store import MemoryStore
from addon.hooks.holder import RuntimeHolder
from addon.hooks.pipeline import RpcPipeline
from addon.pipeline.context import RpcContext
from addon.quota.local import RateLimiter
from addon.quota.redis_limiter import SharedLimiter
from addon.redislink.link import RedisLink
from addon.reporting.usage import UsageAggregator
from addon.runtime import Runtime
from addon.subs.hub import NoUpstream
from addon.upstream.forward import TransportError
from common.config import RedisConfig, parse_config
from tests.fakes import FakeClock
from tests.redis_server import RedisServer

A = "http://a.example:9944"
B = "http://b.example:9944"

# --- the pipeline with a fake upstream ------------------------------------------------------


class FakeUpstreams:
    """The upstream transport: answers per URL, a callable(body) -> (status,
    bytes) or a TransportError (default: every call answered ``<method>-ok``)."""

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
            return 200, json.dumps(ok_answer(doc)).encode()
        return b(doc)


def ok_answer(doc: Any) -> Any:
    """``<method>-ok`` for each call of ``doc`` (a call or a batch)."""
    if isinstance(doc, list):
        return [ok_answer(d) for d in doc]
    return {"jsonrpc": "2.0", "id": doc["id"], "result": f"{doc['method']}-ok"}


def make(**proxy: Any) -> tuple[list[Any], FakeUpstreams, Runtime]:
    """The addons a POST goes through (pipeline, guard), the fake upstream
    behind them (two finney nodes, ``A`` and ``B``) and the runtime, on a
    ``FakeClock`` at 1000 s; ``proxy`` is merged into the config's proxy part."""
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
    rt = Runtime.build(config, clock=FakeClock(1000.0))
    fake = FakeUpstreams()
    rt.transport = fake
    holder.runtime = rt
    stages = [RpcPipeline(holder), Guard()]
    return stages, fake, rt


def cached_stages(**proxy: Any) -> tuple[list[Any], FakeUpstreams, Runtime]:
    """``make`` with an in-memory edge cache."""
    stages, fake, rt = make(**proxy)
    rt.cache = MemoryStore()
    return stages, fake, rt


def rpc_flow(body: Any, path: str = "/rpc/v1/finney", method: str = "POST") -> Any:
    f = tflow.tflow()
    f.request.method = method
    f.request.path = path
    f.request.content = body if isinstance(body, bytes) else json.dumps(body).encode()
    return f


async def run(stages: list[Any], flow: Any) -> Any:
    """``flow`` through each addon's ``request`` hook, in order."""
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


def request_counts(rt: Runtime) -> dict[tuple[str, str], int]:
    """The live request counter as {(method, outcome): n}."""
    return {(m, o): n for (_net, m, o), n in rt.metrics._requests.items()}


def fork_header(n: int, fork: str = "a") -> dict[str, Any]:
    """A header at height ``n`` whose parent hash names ``fork`` (a reorg is
    another fork letter at the same height)."""
    return {
        "parentHash": f"0x{fork * 2}{n - 1:062x}",
        "number": hex(n),
        "stateRoot": "0x" + "11" * 32,
        "extrinsicsRoot": "0x" + "22" * 32,
        "digest": {"logs": []},
    }


# --- subscriptions: a stand-in hub and client socket ---------------------------------------


class FakeHub:
    """Stands in for ``SubscriptionHub``: one shared subscription per call."""

    def __init__(self, *, serves: bool = True, fail: bool = False) -> None:
        self._serves, self._fail = serves, fail
        self.subscribed: list[tuple[str, list[Any]]] = []
        self.unsubscribed: list[str] = []
        self.greeted = 0
        self.opening: dict[int, int] = {}  # by id(socket), as the hub keeps them
        self.client_opening: dict[str, int] = {}

    def serves(self, network: str) -> bool:
        return self._serves

    def client_subscriptions(self, client: str) -> int:
        return len(self.subscribed) - len(self.unsubscribed)

    async def subscribe(self, network: str, kind: Any, params: list[Any], send: Any, owner: Any):
        if self._fail:
            raise NoUpstream("nobody")
        self.subscribed.append((kind.subscribe, params))
        hub = self

        class Shared:
            upstream = type("U", (), {"id": "endpoint-srf-00000000000000aa"})()

            def greet(self, sub: Any) -> None:
                hub.greeted += 1

        sub = type("S", (), {"sub_id": f"sub{len(self.subscribed)}"})()
        return Shared(), sub

    def unsubscribe(self, sub_id: str, owner: Any) -> bool:
        self.unsubscribed.append(sub_id)
        return True


class FakeSocket:
    """A client socket as the pipeline sees it: what it was sent, its subscriptions."""

    def __init__(self, client: str = "198.51.100.7") -> None:
        self.network, self.client = "finney", client
        self.tier: str | None = None
        self.subscriptions: dict[str, str] = {}
        self.sent: list[bytes] = []
        self.live = True

    def send(self, body: bytes) -> None:
        self.sent.append(body)

    def changed(self) -> None:
        pass


def pipeline_with_hub(hub: FakeHub, **proxy: Any) -> tuple[RpcPipeline, Runtime]:
    """A pipeline whose runtime's subscription hub is ``hub``."""
    _, _, rt = make(**proxy)
    rt.subs = hub  # type: ignore[assignment]
    holder = RuntimeHolder()
    holder.runtime = rt
    return RpcPipeline(holder), rt


async def ws_message(pipe: RpcPipeline, sock: FakeSocket, doc: Any) -> tuple[RpcContext, Any]:
    """``doc`` as a WebSocket message from ``sock``: the call's state and its answer."""
    rpc = await pipe.message(json.dumps(doc).encode(), sock, sock)
    assert rpc.reply is not None
    return rpc, rpc.reply.doc


# --- a node's WebSocket, in process --------------------------------------------------------


def block_hash(n: int) -> str:
    return f"0x{n:064x}"


class NodeChain:
    """The chain the ``WsNode`` stand-ins serve: its best height, headers and hashes."""

    def __init__(self, height: int = 10) -> None:
        self.height = height

    def header(self, n: int) -> dict[str, Any]:
        return fork_header(n)


class WsNode:
    """A node's WebSocket on 127.0.0.1 (a real aiohttp server): answers
    ``chain_subscribeNewHeads`` with a subscription id and at once the current
    head (as a Substrate node does), ``chain_unsubscribeNewHeads``,
    ``chain_getBlockHash`` and ``chain_getHeader``; ``push`` sends the next head
    to every subscription; ``kill`` closes its sockets and stops listening.
    ``silent`` answers nothing; ``early`` sends a subscription's first head
    before the answer that names it; ``muted`` answers calls but pushes
    nothing. ``chain_subscribeFinalizedHeads`` is served as new heads are
    (the same headers: this chain finalizes at once)."""

    def __init__(self, name: str, chain: NodeChain, *, silent: bool = False) -> None:
        self.name, self.chain, self.silent = name, chain, silent
        self.early = False
        self.muted = False
        self.notification: dict[str, str] = {}  # subscription id -> its notification method
        self.calls: list[tuple[str, Any]] = []
        self.subs: dict[str, Any] = {}  # subscription id -> its socket
        self.sockets: list[web.WebSocketResponse] = []
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._count = 0

    async def start(self) -> WsNode:
        app = web.Application()
        app.router.add_get("/", self._handle)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"ws://127.0.0.1:{port}/"
        return self

    def subscribes(self) -> int:
        return sum(m == "chain_subscribeNewHeads" for m, _ in self.calls)

    def unsubscribes(self) -> int:
        return sum(m == "chain_unsubscribeNewHeads" for m, _ in self.calls)

    async def _handle(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.sockets.append(ws)
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                await self._answer(ws, json.loads(msg.data))
        return ws

    async def _answer(self, ws: web.WebSocketResponse, doc: dict[str, Any]) -> None:
        method, params = doc["method"], doc.get("params") or []
        self.calls.append((method, params))
        if self.silent:
            return
        reply: dict[str, Any] = {"jsonrpc": "2.0", "id": doc["id"]}
        head = None
        if method in ("chain_subscribeNewHeads", "chain_subscribeFinalizedHeads"):
            self._count += 1
            sub = f"{self.name}-sub-{self._count}"
            self.subs[sub] = ws
            self.notification[sub] = (
                "chain_newHead" if method == "chain_subscribeNewHeads" else "chain_finalizedHead"
            )
            reply["result"] = sub
            head = self._note(sub, self.chain.height)
            if self.early:
                await ws.send_str(head)
                head = None
        elif method in ("chain_unsubscribeNewHeads", "chain_unsubscribeFinalizedHeads"):
            reply["result"] = self.subs.pop(params[0], None) is not None
        elif method == "chain_getBlockHash":
            reply["result"] = block_hash(params[0])
        elif method == "chain_getHeader":
            reply["result"] = self.chain.header(int(params[0], 16))
        else:
            reply["error"] = {"code": -32601, "message": "Method not found"}
        await ws.send_str(json.dumps(reply))
        if head is not None:
            await ws.send_str(head)

    def _note(self, sub: str, n: int) -> str:
        params = {"subscription": sub, "result": self.chain.header(n)}
        method = self.notification.get(sub, "chain_newHead")
        return json.dumps({"jsonrpc": "2.0", "method": method, "params": params})

    async def push(self) -> None:
        """The chain moves on one block; every subscription here is told
        (unless ``muted``: the node has the block and says nothing)."""
        self.chain.height += 1
        if self.muted:
            return
        for sub, ws in list(self.subs.items()):
            if not ws.closed:
                await ws.send_str(self._note(sub, self.chain.height))

    async def kill(self) -> None:
        """The node dies: its sockets close and nothing listens any more."""
        for ws in self.sockets:
            await ws.close()
        self.subs.clear()
        await self.stop()

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()


# --- Redis ---------------------------------------------------------------------------------


def redis_link(server: RedisServer, prefix: str = "t:", timeout_ms: float = 50) -> RedisLink:
    return RedisLink(
        RedisConfig(url=server.url, key_prefix=prefix, timeout_ms=timeout_ms, safe_url=server.url)
    )


def shared_limiter(link: RedisLink, requests: int = 100, window_s: float = 60) -> SharedLimiter:
    return SharedLimiter(link, RateLimiter(requests, window_s, clock=time.monotonic))


# --- usage and logs ------------------------------------------------------------------------


def usage_record(agg: UsageAggregator, **kw: Any) -> None:
    """One call recorded (a finney chain_getHeader on e1 unless ``kw`` says else)."""
    base = {
        "network": "finney",
        "method": "chain_getHeader",
        "endpoint": "e1",
        "latency_ms": 10.0,
        "error": False,
        "failover": False,
        "cache_hit": False,
    }
    agg.record(**{**base, **kw})


def log_lines(caplog: pytest.LogCaptureFixture, text: str) -> int:
    """How many log lines contain ``text``."""
    return sum(text in r.getMessage() for r in caplog.records)
