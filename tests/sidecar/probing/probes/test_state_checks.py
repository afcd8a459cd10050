"""The state checks of a full probe round, against the real simulated node
(``--state-keep``) over HTTP and WebSocket, and the answers they must read
right (a fake transport): held, discarded, unknown, rate-limited."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import aiohttp
import pytest

from common.config import FINNEY_GENESIS
from sidecar.probing.horizon import Horizon, observe, plan
from sidecar.probing.probes import ProbeCall
from sidecar.probing.probes.jsonrpc_client import RpcCall, RpcReply
from sidecar.probing.probes.state import check_state, state_checks, state_verdict
from simnode import SimNode
from tests.sidecar.probing.probes.helpers import free_port, make_endpoint, secret_url

KINDS = ["node-rpc", "node-wss"]


@pytest.fixture
async def node() -> AsyncIterator[SimNode]:
    n = SimNode(
        port=0,
        genesis=FINNEY_GENESIS,
        start_height=5000,
        epoch=time.time() - 600,
        block_time=2,
        state_keep=100,
        shutdown_timeout=0.2,
    )
    await n.start()
    yield n
    await n.stop()


def call_for(node_or_url: SimNode | str, kind: str, session: aiohttp.ClientSession) -> ProbeCall:
    base = node_or_url.url if isinstance(node_or_url, SimNode) else node_or_url
    if kind == "node-wss":
        base = "ws" + base.removeprefix("http")
    return ProbeCall(make_endpoint(secret_url(base), kind), session, timeout_s=3.0)


@pytest.mark.parametrize("kind", KINDS)
async def test_the_state_a_pruned_node_holds_and_the_state_it_discarded(
    kind: str, node: SimNode, session: aiohttp.ClientSession
) -> None:
    best = node.chain.best()
    blocks = (best - 10, best - 99, best - 150, best - 4000)
    got = dict(await check_state(call_for(node, kind, session), blocks))
    # the head may move by a block while checking: the edge may move with it
    assert got[best - 10] is True and got[best - 150] is False and got[best - 4000] is False
    assert best - 99 in got
    assert node.calls["chain_getBlockHash"] == 4 and node.calls["state_getStorage"] == 4


@pytest.mark.parametrize("kind", KINDS)
async def test_rounds_of_checks_find_the_horizon_of_a_real_node(
    kind: str, node: SimNode, session: aiohttp.ClientSession
) -> None:
    h = Horizon()
    for _ in range(20):
        best = node.chain.best()
        blocks = plan(h, best)
        h = observe(h, best, await check_state(call_for(node, kind, session), blocks), False)
        if h.window.exact:
            break
    best = node.chain.best()
    assert h.window.exact and h.earliest(best) == best - 99, h


async def test_nothing_to_check_asks_nothing(node: SimNode, session: aiohttp.ClientSession) -> None:
    assert await check_state(call_for(node, "node-rpc", session), ()) == ()
    assert node.requests == 0


@pytest.mark.parametrize("kind", KINDS)
async def test_an_unreachable_node_is_no_reading(kind: str, session: aiohttp.ClientSession) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    assert await check_state(call_for(url, kind, session), (5, 6)) == ()


class Scripted:
    """A transport answering each batch from a script (one list of replies per batch)."""

    def __init__(self, *batches: list[RpcReply]) -> None:
        self.batches = list(batches)
        self.sent: list[list[RpcCall]] = []

    async def batch(self, calls: Sequence[RpcCall]) -> tuple[list[RpcReply], int]:
        self.sent.append(list(calls))
        return self.batches.pop(0), 1


H = "0x" + "ab" * 32


def ok(method: str, result: Any) -> RpcReply:
    return RpcReply(method, result=result)


def err(method: str, message: str, code: int = 4003) -> RpcReply:
    return RpcReply(method, error={"code": code, "message": message})


async def test_answers_are_read_right() -> None:
    rpc = Scripted(
        [
            ok("chain_getBlockHash", H),
            ok("chain_getBlockHash", H),
            ok("chain_getBlockHash", None),  # a block it never had
            ok("chain_getBlockHash", H),
            ok("chain_getBlockHash", H),
            err("chain_getBlockHash", "boom"),
        ],
        [
            ok("state_getStorage", None),  # the key absent: the state is there
            err("state_getStorage", f"Client error: State already discarded for {H}"),
            err("state_getStorage", "Client error: UnknownBlock: Header was not found"),
            err("state_getStorage", "Internal error", -32603),  # says nothing
        ],
    )
    got = await state_checks(rpc, (10, 20, 30, 40, 50, 60))
    assert got == ((10, True), (20, False), (30, False), (40, False))
    assert [c.method for c in rpc.sent[1]] == ["state_getStorage"] * 4


async def test_a_rate_limited_node_says_nothing() -> None:
    limited = err("chain_getBlockHash", "Too many requests", -32029)
    assert await state_checks(Scripted([limited, ok("chain_getBlockHash", H)]), (1, 2)) == ()
    rpc = Scripted(
        [ok("chain_getBlockHash", H)], [err("state_getStorage", "rate limit exceeded", 429)]
    )
    assert await state_checks(rpc, (5,)) == ()


def test_state_verdict() -> None:
    assert state_verdict(ok("state_getStorage", "0x01")) is True
    assert state_verdict(err("state_getStorage", "State already discarded for 0x…")) is False
    assert state_verdict(err("state_getStorage", "unknown block")) is False
    assert state_verdict(err("state_getStorage", "Method not found", -32601)) is None
    assert state_verdict(RpcReply("state_getStorage", error="weird")) is None
