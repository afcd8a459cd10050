"""The node's own log of arrivals (``GET /_sim/arrivals``): each HTTP request
and WebSocket message, when it was read, its methods and who sent it; and
``busiest``, the second holding the most calls, as ``max_rps_seen`` counts."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from simnode import SimNode
from simnode.arrivals import Arrival, ArrivalLog, busiest
from tests.fakes import FakeClock
from tests.simnode.helpers import EPOCH, req


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(EPOCH)


@pytest.fixture
async def node(clock: FakeClock) -> AsyncIterator[SimNode]:
    n = SimNode(name="arr", clock=clock, epoch=EPOCH, start_height=1000, rng_seed=1)
    await n.start()
    try:
        yield n
    finally:
        await n.stop()


async def _arrivals(session: aiohttp.ClientSession, node: SimNode, query: str = "") -> Any:
    async with session.get(f"{node.url}/_sim/arrivals{query}") as r:
        return r.status, await r.json()


async def test_each_request_is_logged_with_its_time_methods_and_sender(
    node: SimNode, clock: FakeClock, session: aiohttp.ClientSession
) -> None:
    agent = {"User-Agent": "chainproxy"}
    async with session.post(node.url, json=req("system_chain"), headers=agent) as r:
        assert r.status == 200
    clock.advance(0.25)
    batch = [req("chain_getHeader", rid=1), req("system_health", rid=2)]
    async with session.post(node.url, json=batch) as r:
        assert r.status == 200
    clock.advance(0.25)
    async with session.ws_connect(node.url, headers={"User-Agent": "ws-client"}) as ws:
        await ws.send_json(req("system_name"))
        assert "result" in await ws.receive_json(timeout=2)
    status, doc = await _arrivals(session, node)
    assert status == 200 and doc["dropped"] == 0
    got = [(a["t"], a["transport"], a["calls"], a["methods"], a["agent"]) for a in doc["arrivals"]]
    assert got[0] == (EPOCH, "http", 1, ["system_chain"], "chainproxy")
    assert got[1][:4] == (EPOCH + 0.25, "http", 2, ["chain_getHeader", "system_health"])
    assert got[1][4].startswith("Python") and "aiohttp" in got[1][4]  # a plain aiohttp client
    assert got[2] == (EPOCH + 0.5, "ws", 1, ["system_name"], "ws-client")
    assert all(a["peer"].startswith("127.0.0.1:") for a in doc["arrivals"])
    _, since = await _arrivals(session, node, f"?since={EPOCH + 0.1}")
    assert [a["methods"][0] for a in since["arrivals"]] == ["chain_getHeader", "system_name"]
    assert (await _arrivals(session, node, "?since=soon"))[0] == 400
    async with session.post(node.url + "/_sim/reset") as r:
        assert r.status == 200
    assert (await _arrivals(session, node))[1]["arrivals"] == []


def test_the_log_is_bounded_and_says_how_many_it_dropped() -> None:
    log = ArrivalLog(max_kept=3)
    for i in range(5):
        log.add(Arrival(float(i), "http", 1, ("system_chain",), "", ""))
    doc = log.to_json()
    assert doc["dropped"] == 2 and [a["t"] for a in doc["arrivals"]] == [2.0, 3.0, 4.0]


def test_busiest_is_the_second_max_rps_seen_counts() -> None:
    def at(t: float, calls: int = 1) -> dict[str, Any]:
        return {"t": t, "calls": calls}

    arrivals = [at(0.0), at(0.5, 3), at(0.9), at(1.0), at(1.4), at(2.5)]
    most, window = busiest(arrivals)
    # (t - 1, t]: the call at 0.0 has left the window ending at 1.0
    assert most == 6 and [a["t"] for a in window] == [0.5, 0.9, 1.0, 1.4]
    assert busiest([]) == (0, [])
