"""node-rpc and node-wss probes against the real simulated node on 127.0.0.1."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from common.config import FINNEY_GENESIS, Endpoint
from sidecar.probing.probes import ProbeCall, probe, probe_node_rpc, probe_node_wss
from sidecar.probing.results import (
    ABORTED,
    BAD_RESPONSE,
    DEAD,
    LIVE,
    RATE_LIMITED,
    TIMEOUT,
    WRONG_CHAIN,
    ProbeResult,
)
from simnode import SimNode
from tests.sidecar.probing.probes.helpers import (
    FIXED_NOW,
    assert_no_secret,
    clock,
    free_port,
    make_endpoint,
    secret_url,
)

KINDS = ["node-rpc", "node-wss"]
OTHER_GENESIS = "0x" + "ee" * 32

MakeNode = Callable[..., Awaitable[SimNode]]


@pytest.fixture
async def make_node() -> AsyncIterator[MakeNode]:
    nodes: list[SimNode] = []

    async def make(*, archive: bool = False) -> SimNode:
        node = SimNode(
            port=0,
            seed="finney",
            genesis=FINNEY_GENESIS,
            archive=archive,
            start_height=5000,
            epoch=time.time() - 600,
            block_time=2,
            shutdown_timeout=0.2,
        )
        await node.start()
        nodes.append(node)
        return node

    yield make
    for n in nodes:
        await n.stop()


def endpoint_for(node_or_base: SimNode | str, kind: str, *, secret: bool = True) -> Endpoint:
    base = node_or_base.url if isinstance(node_or_base, SimNode) else node_or_base
    if kind == "node-wss":
        base = "ws" + base.removeprefix("http")
    return make_endpoint(secret_url(base) if secret else base + "/", kind)


async def run(
    ep: Endpoint,
    session: aiohttp.ClientSession,
    *,
    kind: Any = "full",
    timeout_s: float = 3.0,
    genesis: str | None = FINNEY_GENESIS,
) -> ProbeResult:
    result = await probe(ep, session, kind=kind, timeout_s=timeout_s, clock=clock, genesis=genesis)
    assert_no_secret(result.detail)
    assert result.endpoint_id == ep.id
    assert result.at == FIXED_NOW
    return result


@pytest.mark.parametrize("kind", KINDS)
async def test_full_probe_live(
    kind: str, make_node: MakeNode, session: aiohttp.ClientSession
) -> None:
    node = await make_node(archive=True)
    before = node.state()
    result = await run(endpoint_for(node, kind), session)
    after = node.state()
    assert result.classification == LIVE, result
    assert result.ok
    assert result.kind == "full"
    assert before["best"] >= 5000
    assert before["best"] <= (result.best or 0) <= after["best"]
    assert before["finalized"] <= (result.finalized or 0) <= after["finalized"]
    assert result.archive is True
    assert isinstance(result.latency_ms, int) and 0 <= result.latency_ms < 3000
    assert "best" in result.detail and "archive yes" in result.detail


@pytest.mark.parametrize("kind", KINDS)
async def test_pruned_node_is_not_archive(
    kind: str, make_node: MakeNode, session: aiohttp.ClientSession
) -> None:
    node = await make_node(archive=False)
    result = await run(endpoint_for(node, kind), session)
    assert result.classification == LIVE
    assert result.archive is False


@pytest.mark.parametrize("kind", KINDS)
async def test_head_probe_is_cheap(
    kind: str, make_node: MakeNode, session: aiohttp.ClientSession
) -> None:
    node = await make_node()
    result = await run(endpoint_for(node, kind), session, kind="head")
    assert result.classification == LIVE
    assert result.kind == "head"
    assert result.best is not None and result.finalized is not None
    assert result.finalized <= result.best
    assert result.archive is None
    # only the head calls and the best block's runtime, no health / genesis / archive calls
    assert set(node.calls) == {
        "chain_getHeader",
        "chain_getFinalizedHead",
        "state_getRuntimeVersion",
    }
    assert node.calls["chain_getHeader"] == 2 and node.calls["state_getRuntimeVersion"] == 1
    assert (result.spec_name, result.spec_version) == ("node-subtensor", 300)
    assert "spec 300" in result.detail


@pytest.mark.parametrize("kind", KINDS)
async def test_head_probe_reads_the_runtime_of_the_best_block(
    kind: str, make_node: MakeNode, session: aiohttp.ClientSession
) -> None:
    node = await make_node()
    node.set_faults(upgrade_at=node.chain.best() + 1000, upgrade_spec=307)
    assert (await run(endpoint_for(node, kind), session, kind="head")).spec_version == 300
    node.set_faults(upgrade_at=node.chain.best())  # the best block runs the new runtime
    result = await run(endpoint_for(node, kind), session, kind="head")
    assert (result.classification, result.spec_version) == (LIVE, 307)
    full = await run(endpoint_for(node, kind), session)  # the full probe does not ask
    assert full.spec_version is None


async def test_full_http_probe_uses_two_requests(
    make_node: MakeNode, session: aiohttp.ClientSession
) -> None:
    node = await make_node()
    await run(endpoint_for(node, "node-rpc"), session)
    assert node.requests == 2  # two HTTP batches
    assert node.calls == {
        "system_health": 1,
        "chain_getHeader": 2,
        "chain_getFinalizedHead": 1,
        "chain_getBlockHash": 2,
        "state_getStorage": 1,
    }


@pytest.mark.parametrize("kind", KINDS)
async def test_wrong_chain(kind: str, make_node: MakeNode, session: aiohttp.ClientSession) -> None:
    node = await make_node()
    node.set_faults(genesis=OTHER_GENESIS)
    result = await run(endpoint_for(node, kind), session)
    assert result.classification == WRONG_CHAIN
    assert result.best is not None  # heights are still reported
    # no configured genesis: nothing to compare with
    result = await run(endpoint_for(node, kind), session, genesis=None)
    assert result.classification == LIVE
    assert "chain_getBlockHash" in node.calls


async def test_genesis_compare_ignores_case(
    make_node: MakeNode, session: aiohttp.ClientSession
) -> None:
    node = await make_node()
    result = await run(endpoint_for(node, "node-rpc"), session, genesis=FINNEY_GENESIS.upper())
    assert result.classification == LIVE


@pytest.mark.parametrize("kind", KINDS)
async def test_lag_shows_in_best(
    kind: str, make_node: MakeNode, session: aiohttp.ClientSession
) -> None:
    node = await make_node()
    node.set_faults(lag=10)
    result = await run(endpoint_for(node, kind), session, kind="head")
    state = node.state()
    assert result.classification == LIVE
    assert result.best is not None
    assert state["head"] - 11 <= result.best <= state["head"] - 10


@pytest.mark.parametrize("kind", KINDS)
async def test_dead(kind: str, session: aiohttp.ClientSession) -> None:
    ep = endpoint_for(f"http://127.0.0.1:{free_port()}", kind)
    for probe_kind in ("full", "head"):
        result = await run(ep, session, kind=probe_kind)
        assert result.classification == DEAD
        assert result.latency_ms is None
        assert result.detail == "connection refused"


@pytest.mark.parametrize("kind", KINDS)
async def test_hang_times_out_within_budget(
    kind: str, make_node: MakeNode, session: aiohttp.ClientSession
) -> None:
    node = await make_node()
    node.set_faults(hang=True)
    t0 = time.monotonic()
    result = await run(endpoint_for(node, kind), session, timeout_s=0.4)
    assert time.monotonic() - t0 < 0.9
    assert result.classification == TIMEOUT
    assert result.latency_ms is None


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("status", "expected"), [(503, "http-503"), (429, RATE_LIMITED)])
async def test_http_status(
    kind: str,
    status: int,
    expected: str,
    make_node: MakeNode,
    session: aiohttp.ClientSession,
) -> None:
    node = await make_node()
    node.set_faults(http_status=status)
    result = await run(endpoint_for(node, kind), session)
    assert result.classification == expected
    assert str(status) in result.detail


@pytest.mark.parametrize("kind", KINDS)
async def test_garbage_is_bad_response(
    kind: str, make_node: MakeNode, session: aiohttp.ClientSession
) -> None:
    node = await make_node()
    node.set_faults(garbage=True)
    result = await run(endpoint_for(node, kind), session)
    assert result.classification == BAD_RESPONSE


@pytest.mark.parametrize("kind", KINDS)
async def test_truncate_is_bad_response(
    kind: str, make_node: MakeNode, session: aiohttp.ClientSession
) -> None:
    node = await make_node()
    node.set_faults(truncate=True)
    result = await run(endpoint_for(node, kind), session)
    assert result.classification in (BAD_RESPONSE, ABORTED)


@pytest.mark.parametrize("kind", KINDS)
async def test_close_is_aborted(
    kind: str, make_node: MakeNode, session: aiohttp.ClientSession
) -> None:
    node = await make_node()
    node.set_faults(close=True)
    result = await run(endpoint_for(node, kind), session)
    assert result.classification == ABORTED


async def test_ws_closed_mid_probe_is_aborted(
    make_node: MakeNode, session: aiohttp.ClientSession
) -> None:
    node = await make_node()
    # accept the upgrade, then refuse the messages: the socket closes with 1013
    ep = endpoint_for(node, "node-wss")
    node.set_faults(latency_ms=50)
    pending = probe_node_wss(ProbeCall(ep, session, timeout_s=3, clock=clock, genesis=None))
    task = asyncio.ensure_future(pending)
    await asyncio.sleep(0.02)
    node.set_faults(http_status=503)
    result = await task
    assert result.classification == ABORTED
    assert "1013" in result.detail


async def test_die_then_dead(make_node: MakeNode, session: aiohttp.ClientSession) -> None:
    node = await make_node()
    ep = endpoint_for(node, "node-rpc")
    assert (await run(ep, session, kind="head")).ok
    node.set_faults(die=True)
    await node.wait_stopped()
    assert (await run(ep, session, kind="head")).classification == DEAD


async def test_latency_is_measured(make_node: MakeNode, session: aiohttp.ClientSession) -> None:
    node = await make_node()
    node.set_faults(latency_ms=120)
    result = await probe_node_rpc(
        ProbeCall(endpoint_for(node, "node-rpc"), session, kind="head", timeout_s=3, clock=clock)
    )
    assert result.ok
    assert result.latency_ms is not None and 110 <= result.latency_ms < 1000


async def test_session_timeout_shorter_than_probe_is_timeout(make_node: MakeNode) -> None:
    node = await make_node()
    node.set_faults(hang=True)
    short = aiohttp.ClientTimeout(total=0.2)
    async with aiohttp.ClientSession(timeout=short) as s:
        result = await run(endpoint_for(node, "node-rpc"), s, timeout_s=2)
    assert result.classification == TIMEOUT
