"""A node's limits said inside a 200 answer, through real processes: two of
three nodes answer ``state_getKeysPaged`` with -32004 "RPC work limit
exceeded" (the simulator's ``refuse_methods`` fault). Every client call is
answered by the third node, none gets the refusal passed on; when the third
refuses too, the client gets 503 ``upstream_capacity`` with ``Retry-After``,
as when every node says 429."""

from __future__ import annotations

import time
from collections.abc import Iterator
from itertools import count
from typing import Any

import pytest

from common.endpoint_id import endpoint_id
from tests.e2e.harness import Stack, base_config
from tests.e2e.helpers import PROXY_DEFAULTS, call, next_client_ip, post

pytestmark = pytest.mark.e2e

QUIET_PROBES = {"probe": {"interval_s": 60, "head_interval_s": 2, "timeout_s": 2}}
NO_QUOTA = {"rate_limit": {"requests": 1_000_000, "window_s": 60}}
KEYS = "state_getKeysPaged"
_prefixes = count(1)


def _keys() -> dict[str, Any]:
    """A keys read under a prefix never asked before: a cache miss every time."""
    return call(KEYS, [f"0x{next(_prefixes):08x}", 10])


@pytest.fixture
def nodes3(tmp_path: Any) -> Iterator[Stack]:
    s = Stack(tmp_path)
    try:
        epoch = time.time() - 600
        for name in ("alpha", "beta", "gamma"):
            s.start_node(name, epoch=epoch)
        s.write_config(
            base_config(tmp_path, s.nodes, top=QUIET_PROBES, **PROXY_DEFAULTS, **NO_QUOTA)
        )
        s.start_sidecar()
        s.start_proxy()
        yield s
    finally:
        s.stop()


async def test_a_nodes_work_limit_is_its_capacity_not_the_clients_answer(nodes3: Stack) -> None:
    alpha, beta, gamma = nodes3.nodes
    for refuser in (alpha, beta):
        refuser.control(refuse_methods=[KEYS])
    # the slowest, by far: the refusing nodes are chosen first when free (at
    # 30 ms, a loaded machine's slow probe of alpha once made gamma look the
    # faster, and alpha was never asked: a flaky run)
    gamma.control(latency_ms=150)
    ip = next_client_ip()
    replies = [await post(nodes3.rpc_url(), _keys(), client_ip=ip) for _ in range(24)]
    for r in replies:
        assert r.status == 200 and "result" in r.body, (r.status, r.body)
        assert r.headers["X-Chainproxy-Upstream"] == endpoint_id(gamma.url)
    # the refusing nodes were asked, and refused (the calls failed over in time)
    refused = {n.name: n.state()["calls"].get(KEYS, 0) for n in (alpha, beta)}
    assert all(refused.values()), refused
    assert any(int(r.headers["X-Chainproxy-Attempts"]) >= 2 for r in replies)

    gamma.control(refuse_methods=[KEYS])  # now every node is at its limit
    r = await post(nodes3.rpc_url(), _keys(), client_ip=ip)
    assert r.status == 503, r.body
    assert int(r.headers["Retry-After"]) >= 1
    data = r.body["error"]["data"]
    assert data["policy"] == "upstream_capacity" and data["retry_after"] >= 1
    assert data["attempts"] and {a["reason"] for a in data["attempts"]} == {"work-limited"}
    assert r.body["error"]["code"] != -32004  # never the node's refusal as the answer
