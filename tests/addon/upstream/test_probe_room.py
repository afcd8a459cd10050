"""The room a configured budget leaves for the sidecar's probes
(``budgets.PROBE_CALLS``) is what the probes send, counted by the node itself
in its log of arrivals: a full probe of a pruned node with the genesis
checked, the state checks of its horizon right after it (the most a probe
asks), and a head probe."""

from __future__ import annotations

import time

import aiohttp

from addon.upstream.budgets import PROBE_CALLS
from common.config import FINNEY_GENESIS, Endpoint
from sidecar.probing.horizon import Horizon, plan
from sidecar.probing.probes import probe_node_rpc
from sidecar.probing.probes.base import ProbeCall
from sidecar.probing.probes.state import check_state
from sidecar.probing.results import LIVE
from simnode import SimNode


async def test_the_probes_of_a_node_fit_in_the_room_left_for_them() -> None:
    node = SimNode(genesis=FINNEY_GENESIS, start_height=5000, epoch=time.time() - 600)
    await node.start()
    try:
        endpoint = Endpoint(url=node.url, provider="p", kind="node-rpc", network="finney", id="e")
        async with aiohttp.ClientSession() as session:
            for kind in ("full", "head"):
                call = ProbeCall(endpoint, session, kind=kind, timeout_s=5, genesis=FINNEY_GENESIS)
                result = await probe_node_rpc(call)
                assert result.classification == LIVE, result
                if kind == "full":
                    checked = await check_state(call, plan(Horizon(), result.best))
                    assert len(checked) == 2, checked
        arrivals = node.arrivals.to_json()["arrivals"]
    finally:
        await node.stop()
    full, head = arrivals[:4], arrivals[4:]
    assert [a["calls"] for a in full] == [5, 2, 2, 2] and [a["calls"] for a in head] == [3, 1]
    # the two may fall in the same second: the room left is just enough for both
    assert sum(a["calls"] for a in arrivals) == PROBE_CALLS
