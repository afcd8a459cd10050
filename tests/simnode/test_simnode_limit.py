"""The ``limit_rps`` fault (a node that rate-limits its HTTP callers) and the
node's own call-rate counters, over real HTTP on 127.0.0.1 with the node's
clock driven by hand."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from simnode import SimNode
from simnode.faults import Faults, check_fault
from simnode.window import CallRate, SlidingWindow, WindowLimit
from tests.fakes import FakeClock
from tests.simnode.helpers import EPOCH, req


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(EPOCH)


@pytest.fixture
async def node(clock: FakeClock) -> AsyncIterator[SimNode]:
    n = SimNode(name="lim", clock=clock, epoch=EPOCH, start_height=1000, rng_seed=1)
    await n.start()
    try:
        yield n
    finally:
        await n.stop()


async def send(
    session: aiohttp.ClientSession, node: SimNode, body: Any
) -> tuple[int, str | None, Any]:
    """(HTTP status, Retry-After, body: JSON when it is JSON) of one POST."""
    async with session.post(node.url, json=body) as r:
        doc = await r.json() if r.content_type == "application/json" else await r.text()
        return r.status, r.headers.get("Retry-After"), doc


async def statuses(session: aiohttp.ClientSession, node: SimNode, n: int) -> list[int]:
    return [(await send(session, node, req("system_chain", rid=i)))[0] for i in range(n)]


async def test_calls_beyond_the_limit_get_429_without_retry_after_by_default(
    node: SimNode, session: aiohttp.ClientSession
) -> None:
    node.set_faults(limit_rps=3)
    assert await statuses(session, node, 3) == [200] * 3
    status, retry_after, body = await send(session, node, req("system_chain", rid=7))
    assert status == 429 and retry_after is None
    assert body == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32029, "message": "Too many requests"},
    }
    state = node.state()
    assert state["rate_limited"] == 1 and state["requests"] == 4
    # the node's log says which request it refused (whose 429 it was)
    assert [a.refused for a in node.arrivals.entries()] == [False] * 3 + [True]
    assert node.arrivals.to_json()["arrivals"][3]["refused"] is True
    node.set_faults(limit_rps=0)  # off: nothing is refused
    assert await statuses(session, node, 10) == [200] * 10


@pytest.mark.parametrize(("seconds", "header"), [(2, "2"), (1.2, "2"), (0, "0")])
async def test_retry_after_is_whole_seconds_rounded_up(
    node: SimNode, session: aiohttp.ClientSession, seconds: float, header: str
) -> None:
    node.set_faults(limit_rps=1, limit_retry_after_s=seconds)
    assert (await send(session, node, req("system_chain")))[:2] == (200, None)
    assert (await send(session, node, req("system_chain")))[:2] == (429, header)


async def test_the_window_slides(
    node: SimNode, clock: FakeClock, session: aiohttp.ClientSession
) -> None:
    node.set_faults(limit_rps=2)
    assert await statuses(session, node, 2) == [200, 200]  # at t
    clock.advance(0.5)
    assert await statuses(session, node, 1) == [429]
    clock.advance(0.499)
    assert await statuses(session, node, 1) == [429]  # t + 0.999: both still in the window
    clock.advance(0.001)
    assert await statuses(session, node, 3) == [200, 200, 429]  # t + 1: both left it
    # refused calls do not count: a second on, a caller that kept asking gets the limit
    clock.advance(1.0)
    assert await statuses(session, node, 3) == [200, 200, 429]
    assert node.state()["rate_limited"] == 4


async def test_a_batch_counts_its_calls(node: SimNode, session: aiohttp.ClientSession) -> None:
    node.set_faults(limit_rps=5, limit_retry_after_s=1)
    batch = [req("system_chain", rid=i) for i in range(4)]
    status, _, body = await send(session, node, batch)
    assert status == 200 and len(body) == 4
    status, retry_after, body = await send(session, node, batch[:2])  # 4 + 2 > 5
    assert (status, retry_after, body["id"]) == (429, "1", None)
    assert (await send(session, node, req("system_chain")))[0] == 200  # 4 + 1 fits
    node.set_faults(limit_rps=0)
    node.set_faults(limit_rps=5)  # a new limit starts with an empty window
    six = [req("system_chain", rid=i) for i in range(6)]
    assert (await send(session, node, six))[0] == 429  # more calls than the limit: never


async def test_limit_comes_before_the_other_faults_and_leaves_http_status_alone(
    node: SimNode, session: aiohttp.ClientSession
) -> None:
    node.set_faults(limit_rps=1, http_status=503)
    assert (await send(session, node, req("system_chain")))[:2] == (503, "1")
    assert (await send(session, node, req("system_chain")))[:2] == (429, None)
    node.set_faults(limit_rps=0, http_status=429)  # the plain status keeps its Retry-After
    async with session.post(node.url, json=req("system_chain")) as r:
        assert (r.status, r.headers.get("Retry-After")) == (429, "1")


async def test_websocket_calls_are_not_limited(
    node: SimNode, session: aiohttp.ClientSession
) -> None:
    node.set_faults(limit_rps=1)
    async with session.ws_connect(node.url) as ws:
        for i in range(5):
            await ws.send_json(req("system_chain", rid=i))
            assert (await ws.receive_json(timeout=2))["result"] == "Bittensor"
    assert node.state()["rate_limited"] == 0


async def test_state_counts_the_call_rate_and_reset_clears_it(
    node: SimNode, clock: FakeClock, session: aiohttp.ClientSession
) -> None:
    node.set_faults(limit_rps=4)
    await send(session, node, [req("system_chain", rid=i) for i in range(3)])
    clock.advance(0.6)
    await statuses(session, node, 3)  # 1 admitted, 2 refused: refused calls were received
    state = node.state()
    assert (state["calls_in_last_s"], state["max_rps_seen"], state["rate_limited"]) == (6, 6, 2)
    clock.advance(0.5)  # the batch left the window
    await statuses(session, node, 1)
    state = node.state()
    assert (state["calls_in_last_s"], state["max_rps_seen"]) == (4, 6)
    async with session.post(node.url + "/_sim/reset") as r:
        state = await r.json()
    assert (state["calls_in_last_s"], state["max_rps_seen"], state["rate_limited"]) == (0, 0, 0)
    assert state["faults"]["limit_rps"] == 0 and state["faults"]["limit_retry_after_s"] is None


@pytest.mark.parametrize(
    "body",
    [
        {"limit_rps": -1},
        {"limit_rps": 0.5},
        {"limit_rps": True},
        {"limit_rps": "5"},
        {"limit_rps": None},
        {"limit_retry_after_s": -1},
        {"limit_retry_after_s": "2"},
        {"limit_retry_after_s": False},
    ],
)
async def test_control_refuses_bad_limits(
    node: SimNode, session: aiohttp.ClientSession, body: dict[str, Any]
) -> None:
    async with session.post(node.url + "/_sim/control", json=body) as r:
        assert r.status == 400
        assert next(iter(body)) in (await r.json())["error"]
    assert node.faults == Faults()


def test_limit_values_and_the_fast_path() -> None:
    assert check_fault("limit_rps", 15) == 15.0 and check_fault("limit_rps", 0) == 0.0
    assert check_fault("limit_retry_after_s", 2) == 2.0
    assert check_fault("limit_retry_after_s", None) is None
    assert Faults(limit_rps=15).slow_path
    assert not Faults(limit_retry_after_s=2).slow_path  # no limit, nothing to answer


def test_the_windows_stay_bounded_and_exact_to_a_millisecond() -> None:
    w = SlidingWindow()
    for i in range(100_000):  # 100,000 calls in one second
        w.add(i / 100_000, 1)
    assert w.count == 100_000 and len(w._times) <= 1001
    assert w.expire(1.0005) < 100_000  # the first millisecond has left
    rate = CallRate()
    for t in (0.0, 0.5, 0.9, 1.6, 1.7):
        rate.add(t, 2)
    assert rate.max_seen == 6 and rate.in_window(1.7) == 6  # 0.9, 1.6, 1.7
    assert rate.in_window(3.0) == 0 and rate.max_seen == 6
    limit = WindowLimit()
    assert [limit.admit(0.0, 1, 2.5) for _ in range(3)] == [True, True, False]
