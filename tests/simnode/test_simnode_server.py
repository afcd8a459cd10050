"""Tests of the simulated node over real HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from simnode import FINNEY_GENESIS, SimNode
from simnode.faults import MIB, Faults, byte_delay_s, check_fault
from tests.fakes import FakeClock
from tests.simnode.helpers import EPOCH, req


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(EPOCH)


@pytest.fixture
async def node(clock: FakeClock) -> AsyncIterator[SimNode]:
    n = SimNode(name="t", clock=clock, epoch=EPOCH, start_height=1000, rng_seed=1)
    await n.start()
    try:
        yield n
    finally:
        await n.stop()


async def post(session: aiohttp.ClientSession, url: str, body: Any, timeout: float = 5.0) -> Any:
    async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=timeout)) as r:
        assert r.status == 200
        return await r.json()


async def call(session: aiohttp.ClientSession, node: SimNode, method: str, *params: Any) -> Any:
    out = await post(session, node.url, req(method, list(params)))
    assert "error" not in out, out
    return out["result"]


async def control(session: aiohttp.ClientSession, node: SimNode, **kw: Any) -> dict[str, Any]:
    async with session.post(node.url + "/_sim/control", json=kw) as r:
        assert r.status == 200, await r.text()
        return await r.json()


# ---- basics ------------------------------------------------------------------------------


async def test_url_and_port(node: SimNode) -> None:
    assert node.port > 0
    assert node.url == f"http://127.0.0.1:{node.port}"


async def test_id_echo(node: SimNode, session: aiohttp.ClientSession) -> None:
    for rid in (42, "req-x", None):
        out = await post(session, node.url, req("system_chain", rid=rid))
        assert out == {"jsonrpc": "2.0", "id": rid, "result": "Bittensor"}


async def test_any_path_and_batch(node: SimNode, session: aiohttp.ClientSession) -> None:
    batch = [
        req("chain_getBlockHash", [0], rid=1),
        req("system_health", rid="b"),
        req("nope", rid=None),
        req("chain_getHeader", rid=4),
    ]
    out = await post(session, node.url + "/some/path", batch)
    assert [o["id"] for o in out] == [1, "b", None, 4]
    assert out[0]["result"] == FINNEY_GENESIS
    assert out[1]["result"]["peers"] == 8
    assert out[2]["error"] == {"code": -32601, "message": "Method not found"}
    assert out[3]["result"]["number"] == hex(1000)


async def test_protocol_errors_are_http_200(node: SimNode, session: aiohttp.ClientSession) -> None:
    async with session.post(node.url, data=b"{not json") as r:
        assert r.status == 200
        assert (await r.json())["error"]["code"] == -32700
    out = await post(session, node.url, {"id": 1, "method": "system_chain"})
    assert out["error"]["code"] == -32600
    out = await post(session, node.url, req("chain_getBlockHash", ["zz"]))
    assert out["error"]["code"] == -32602
    async with session.get(node.url) as r:
        assert r.status == 405


async def test_head_advances_with_clock(
    node: SimNode, clock: FakeClock, session: aiohttp.ClientSession
) -> None:
    assert int((await call(session, node, "chain_getHeader"))["number"], 16) == 1000
    clock.t += 12 * 3
    head = await call(session, node, "chain_getHeader")
    assert int(head["number"], 16) == 1003
    fin = await call(session, node, "chain_getFinalizedHead")
    assert fin == await call(session, node, "chain_getBlockHash", 1001)
    assert await call(session, node, "chain_getBlockHash", 1004) is None


async def test_replica_nodes_agree_and_forks_differ(
    clock: FakeClock, session: aiohttp.ClientSession
) -> None:
    kw: dict[str, Any] = {"clock": clock, "epoch": EPOCH, "start_height": 500}
    async with (
        SimNode(**kw) as a,
        SimNode(**kw) as b,
        SimNode(seed="other", **kw) as fork,
    ):
        ha = await call(session, a, "chain_getHeader")
        assert ha == await call(session, b, "chain_getHeader")
        assert ha != await call(session, fork, "chain_getHeader")
        # a hash served by one replica is usable on the other
        h = await call(session, a, "chain_getBlockHash", 450)
        assert await call(session, b, "state_getStorage", "0x01", h) is not None
        out = await post(session, fork.url, req("state_getStorage", ["0x01", h]))
        assert out["error"]["code"] == 4003


# ---- faults -------------------------------------------------------------------------------


async def test_latency(node: SimNode, session: aiohttp.ClientSession) -> None:
    state = await control(session, node, latency_ms=1000)
    assert state["latency_ms"] == 1000
    t0 = time.monotonic()
    await call(session, node, "system_chain")
    assert time.monotonic() - t0 >= 1.0
    # control endpoints are not delayed (a margin for a loaded machine's stalls)
    t0 = time.monotonic()
    async with session.get(node.url + "/_sim/state") as r:
        assert r.status == 200
    assert time.monotonic() - t0 < 0.5


def test_byte_delay_is_linear_in_the_answer_size() -> None:
    assert byte_delay_s(MIB, 200) == pytest.approx(0.2)
    assert byte_delay_s(MIB // 4, 200) == pytest.approx(0.05)
    assert byte_delay_s(MIB, 0) == 0.0 and byte_delay_s(0, 200) == 0.0
    assert check_fault("latency_per_mib_ms", 250) == 250.0
    assert check_fault("byte_slots", 2) == 2
    for key, bad in (("latency_per_mib_ms", -1), ("byte_slots", 0), ("byte_slots", 1.5)):
        with pytest.raises(ValueError):
            check_fault(key, bad)
    assert Faults(latency_per_mib_ms=1).slow_path and not Faults(byte_slots=2).slow_path


HEAVY = ("SubnetInfoRuntimeApi_get_all_metagraphs", "0x01")


async def test_latency_per_mib_queues_light_calls_behind_heavy_ones(
    node: SimNode, session: aiohttp.ClientSession
) -> None:
    # ~1 MiB of hex at 300 ms per MiB holds the node's one byte slot ~0.3 s
    await control(session, node, latency_per_mib_ms=300, byte_slots=1)
    t0 = time.monotonic()
    heavy = asyncio.ensure_future(call(session, node, "state_call", *HEAVY))
    for _ in range(5000):  # until the heavy answer holds the slot
        if node.fault_state.byte_slots_full:
            break
        await asyncio.sleep(0.001)
    held = time.monotonic()
    await call(session, node, "system_chain")  # a light answer waits its turn
    assert time.monotonic() - held >= 0.25
    assert len(await heavy) > 1_000_000
    assert time.monotonic() - t0 >= 0.3
    assert node.fault_state.byte_slots_full is False  # the slot is given back


async def test_bytes_out_counts_answer_bodies(
    node: SimNode, session: aiohttp.ClientSession
) -> None:
    sizes = []
    for body in (req("system_chain"), req("state_call", list(HEAVY)), [req("chain_getHeader")]):
        async with session.post(node.url, json=body) as r:
            sizes.append(len(await r.read()))
    await control(session, node, latency_per_mib_ms=1)  # the faulted path counts too
    async with session.post(node.url, json=req("system_chain")) as r:
        sizes.append(len(await r.read()))
    async with session.ws_connect(node.url) as ws:
        await ws.send_json(req("system_chain", rid=7))
        sizes.append(len((await ws.receive(timeout=2)).data))
    async with session.get(node.url + "/_sim/state") as r:
        assert (await r.json())["bytes_out"] == sum(sizes) > 1_000_000
    assert node.reset()["bytes_out"] == 0


async def test_error_rate(node: SimNode, session: aiohttp.ClientSession) -> None:
    node.set_faults(error_rate=1)
    out = await post(session, node.url, [req("system_chain", rid=i) for i in range(3)])
    assert [o["error"] for o in out] == [{"code": -32603, "message": "Internal error"}] * 3
    assert [o["id"] for o in out] == [0, 1, 2]
    node.set_faults(error_rate=0.5)
    out = await post(session, node.url, [req("system_chain", rid=i) for i in range(200)])
    failed = sum("error" in o for o in out)
    assert 40 < failed < 160


@pytest.mark.parametrize("status", [503, 429])
async def test_http_status(node: SimNode, session: aiohttp.ClientSession, status: int) -> None:
    await control(session, node, http_status=status)
    async with session.post(node.url, json=req("system_chain")) as r:
        assert r.status == status
        assert r.content_type == "text/plain"
        assert str(status) in await r.text()
    await control(session, node, http_status=None)
    assert await call(session, node, "system_chain") == "Bittensor"


async def test_hang(node: SimNode, session: aiohttp.ClientSession) -> None:
    await control(session, node, hang=True)
    pending = asyncio.ensure_future(post(session, node.url, req("system_chain", rid="late")))
    with pytest.raises(asyncio.TimeoutError):
        await post(session, node.url, req("system_chain"), timeout=0.3)
    # the node still answers other requests: state and control
    async with session.get(node.url + "/_sim/state") as r:
        state = await r.json()
    assert state["faults"]["hang"] is True
    assert state["requests"] == 2
    assert not pending.done()
    await control(session, node, hang=False)
    assert (await asyncio.wait_for(pending, 2))["result"] == "Bittensor"


async def test_stop_releases_hung_requests(clock: FakeClock) -> None:
    node = SimNode(clock=clock)
    await node.start()
    node.set_faults(hang=True)
    async with aiohttp.ClientSession() as s:
        pending = asyncio.ensure_future(post(s, node.url, req("system_chain")))
        await asyncio.sleep(0.05)
        t0 = time.monotonic()
        await node.stop()
        assert time.monotonic() - t0 < 1.0
        with pytest.raises(aiohttp.ClientError):
            await pending


async def test_close(node: SimNode, session: aiohttp.ClientSession) -> None:
    node.set_faults(close=True)
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await post(session, node.url, req("system_chain"))
    node.set_faults(close=False)
    assert await call(session, node, "system_chain") == "Bittensor"


async def test_truncate(node: SimNode, session: aiohttp.ClientSession) -> None:
    full = json.dumps(await call(session, node, "chain_getHeader"))
    await control(session, node, truncate=True)
    async with session.post(node.url, json=req("chain_getHeader")) as r:
        assert r.status == 200
        assert r.content_type == "application/json"
        raw = await r.read()
        assert int(r.headers["Content-Length"]) == len(raw)
    assert 0 < len(raw) < len(full)
    with pytest.raises(ValueError):
        json.loads(raw)


async def test_garbage(node: SimNode, session: aiohttp.ClientSession) -> None:
    await control(session, node, garbage=True)
    async with session.post(node.url, json=req("system_chain")) as r:
        assert r.status == 200
        assert r.content_type == "text/html"
        assert "<html>" in await r.text()
        with pytest.raises(aiohttp.ContentTypeError):
            await r.json()


async def test_lag(node: SimNode, session: aiohttp.ClientSession) -> None:
    true_best_hash = await call(session, node, "chain_getBlockHash")
    await control(session, node, lag=4)
    head = await call(session, node, "chain_getHeader")
    assert int(head["number"], 16) == 996
    assert await call(session, node, "chain_getBlockHash", 997) is None
    assert await call(session, node, "chain_getHeader", true_best_hash) is None
    fin = await call(session, node, "chain_getFinalizedHead")
    assert fin == await call(session, node, "chain_getBlockHash", 994)
    assert (await call(session, node, "system_syncState"))["currentBlock"] == 996
    assert node.state()["best"] == 996


async def test_state_keep(clock: FakeClock, session: aiohttp.ClientSession) -> None:
    """``--state-keep K``: the state of the last K blocks only; older state is
    "State already discarded", the block hash is still known; the fault
    changes it and a reset goes back to the node's own."""
    node = SimNode(clock=clock, epoch=EPOCH, start_height=1000, state_keep=64)
    await node.start()
    try:
        key = "0x26aa394eea5630e07c48ae0c9558cef702a5c1b19ab7a04f536c519aca4983ac"
        kept = await call(session, node, "chain_getBlockHash", 1000 - 63)
        gone = await call(session, node, "chain_getBlockHash", 1000 - 64)
        assert await call(session, node, "state_getStorage", key, kept) is not None
        for method, params in (
            ("state_getStorage", [key, gone]),
            ("state_getRuntimeVersion", [gone]),
        ):
            out = await post(session, node.url, req(method, params))
            assert out["error"]["message"] == f"Client error: State already discarded for {gone}"
        assert node.state()["state_keep"] == 64
        await control(session, node, state_keep=None)  # an archive now
        assert await call(session, node, "state_getRuntimeVersion", gone)
        await control(session, node, state_keep=8)
        out = await post(session, node.url, req("state_getStorage", [key, kept]))
        assert "State already discarded" in out["error"]["message"]
        assert node.reset()["state_keep"] == 64
        for bad in (0, -1, True, "8"):
            async with session.post(node.url + "/_sim/control", json={"state_keep": bad}) as r:
                assert r.status == 400, bad
    finally:
        await node.stop()


async def test_freeze(node: SimNode, clock: FakeClock, session: aiohttp.ClientSession) -> None:
    await control(session, node, freeze=True)
    clock.t += 12 * 5
    assert int((await call(session, node, "chain_getHeader"))["number"], 16) == 1000
    await control(session, node, freeze=False)
    assert int((await call(session, node, "chain_getHeader"))["number"], 16) == 1005


async def test_refuse_methods(node: SimNode, session: aiohttp.ClientSession) -> None:
    """A node at its own limits: the listed methods get its error inside a 200,
    in a batch too, the others their answers; a reset lifts it."""
    await control(session, node, refuse_methods=["state_getKeysPaged"])
    keys = req("state_getKeysPaged", ["0x26aa", 10])
    out = await post(session, node.url, keys)
    assert out["error"] == {"code": -32004, "message": "RPC work limit exceeded"}
    batch = await post(
        session,
        node.url,
        [req("system_health", [], 1), req("state_getKeysPaged", ["0x26aa", 10], 2)],
    )
    assert "result" in batch[0] and batch[1]["error"]["code"] == -32004
    await control(session, node, refuse_code=-32005, refuse_message="Limit exceeded")
    assert (await post(session, node.url, keys))["error"]["message"] == "Limit exceeded"
    node.reset()
    assert "result" in await post(session, node.url, keys)


async def test_genesis(node: SimNode, session: aiohttp.ClientSession) -> None:
    wrong = "0x" + "ee" * 32
    await control(session, node, genesis=wrong)
    assert await call(session, node, "chain_getBlockHash", 0) == wrong
    await control(session, node, genesis=None)
    assert await call(session, node, "chain_getBlockHash", 0) == FINNEY_GENESIS


async def test_die(clock: FakeClock, session: aiohttp.ClientSession) -> None:
    node = SimNode(clock=clock)
    await node.start()
    try:
        state = await control(session, node, die=True)
        assert state["die"] is True
        await asyncio.wait_for(node.wait_stopped(), 2)
        assert not node.running
        with pytest.raises(aiohttp.ClientConnectionError):
            await post(session, node.url, req("system_chain"), timeout=1)
    finally:
        await node.stop()


async def test_restart_after_stop(clock: FakeClock, session: aiohttp.ClientSession) -> None:
    node = SimNode(clock=clock)
    await node.start()
    node.set_faults(die=True)
    await node.stop()
    await node.start()  # same port, fresh app, same chain
    try:
        assert node.faults.die is False
        assert await call(session, node, "system_chain") == "Bittensor"
    finally:
        await node.stop()


async def test_hang_survives_restart(clock: FakeClock, session: aiohttp.ClientSession) -> None:
    node = SimNode(clock=clock)
    await node.start()
    node.set_faults(hang=True)
    await node.stop()
    await node.start()
    try:
        with pytest.raises(asyncio.TimeoutError):
            await post(session, node.url, req("system_chain"), timeout=0.2)
        node.reset()
        assert await call(session, node, "system_chain") == "Bittensor"
    finally:
        await node.stop()


async def test_control_validation(node: SimNode, session: aiohttp.ClientSession) -> None:
    for body in (
        {"bogus": 1},
        {"hang": "yes"},
        {"error_rate": 2},
        {"lag": -1},
        {"http_status": True},
        {"genesis": "0x12"},
        {"refuse_methods": "state_getKeysPaged"},
        {"refuse_code": "x"},
        {"mute": 1},
        [1],
    ):
        async with session.post(node.url + "/_sim/control", json=body) as r:
            assert r.status == 400, body
            assert "error" in await r.json()
    # all-or-nothing: a bad key leaves the good ones unapplied
    async with session.post(node.url + "/_sim/control", json={"lag": 2, "bogus": 1}) as r:
        assert r.status == 400
    assert node.faults.lag == 0
    with pytest.raises(ValueError):
        node.set_faults(latency_ms=-5)
    async with session.get(node.url + "/_sim/nothing") as r:
        assert r.status == 404


# ---- observation ---------------------------------------------------------------------------


async def test_counters_and_reset(node: SimNode, session: aiohttp.ClientSession) -> None:
    async with session.get(node.url + "/_sim/state") as r:
        state = await r.json()
    assert state["requests"] == 0 and state["calls"] == {}
    assert state["name"] == "t" and state["archive"] is False
    assert (state["best"], state["finalized"]) == (1000, 998)
    await call(session, node, "system_chain")
    await post(session, node.url, [req("system_chain"), req("author_submitExtrinsic", ["0x00"])])
    await control(session, node, lag=1, http_status=503)
    async with session.post(node.url, json=req("chain_getHeader")) as r:
        assert r.status == 503
    state = node.state()
    assert state["requests"] == 3
    assert state["calls"] == {"system_chain": 2, "author_submitExtrinsic": 1, "chain_getHeader": 1}
    assert state["submitted"] == 1
    async with session.post(node.url + "/_sim/reset") as r:
        state = await r.json()
    assert state["requests"] == 0 and state["calls"] == {} and state["submitted"] == 0
    assert state["faults"]["lag"] == 0 and state["faults"]["http_status"] is None
    assert state["best"] == 1000


async def test_header_is_cheap(node: SimNode) -> None:
    # CPU cost of answering chain_getHeader, without the socket
    from simnode.rpc import parse

    body = json.dumps(req("chain_getHeader")).encode()
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        node.dispatcher.respond(parse(body))
    assert (time.perf_counter() - t0) / n < 0.0005
