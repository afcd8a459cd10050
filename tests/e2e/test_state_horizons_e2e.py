"""State horizons end to end, on real processes: simulated nodes that prune
(``--state-keep``), the sidecar measuring how far back each one's state goes,
and the proxy routing by it. A pruned node is never asked for state it
discarded (counted at the node, in its own log of arrivals), a node wrongly
believed to hold a block is corrected at once and the client still gets the
answer, and a block no node holds is one typed error.

The config says the opposite of the truth on purpose: the pruned node is
configured ``archive: true``, the archive ``archive: false``. Only the probes
count."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from common.endpoint_id import endpoint_id
from tests.e2e.harness import Node, Stack, base_config, http_json
from tests.e2e.helpers import call, next_client_ip, post, wait_until
from tests.e2e.test_routing_e2e import until_applied

pytestmark = pytest.mark.e2e

KEY = "0x26aa394eea5630e07c48ae0c9558cef702a5c1b19ab7a04f536c519aca4983ac"  # System.Number
PROBES = {"interval_s": 1, "head_interval_s": 0.5, "timeout_s": 2}
STATE = ("state_getStorage", "state_getRuntimeVersion")
FAILOVER = {"max_attempts": 3, "attempt_timeout_s": 3, "deadline_s": 6}


@pytest.fixture(scope="module")
def hstack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack(tmp_path_factory.mktemp("horizons"))
    epoch = time.time() - 600  # ~300 blocks above the start height: old blocks exist
    try:
        stack.start_node("lite", epoch=epoch, state_keep=64)
        stack.start_node("full", epoch=epoch, archive=True)
        stack.start_node("shrinking", epoch=epoch, state_keep=2000)
        config = base_config(
            stack.tmp,
            stack.nodes,
            top={"probe": PROBES},
            failover=FAILOVER,
            hedge={"enabled": False},  # every attempt is one the test can count
            prewarm={"max_reads": 0},
            usage={"flush_s": 0.5},
            rate_limit={"requests": 100_000, "window_s": 60},
        )
        for e in config["registry"]["endpoints"]:  # the config is wrong about both
            e["archive"] = e["provider"] == "lite"
        stack.write_config(config)
        stack.start_sidecar()
        stack.start_proxy()
    except BaseException:
        stack.stop()
        raise
    yield stack
    stack.stop()


@pytest.fixture(autouse=True)
def _reset(hstack: Stack) -> Iterator[None]:
    yield
    for n in hstack.nodes:
        if n.proc.alive():
            n.reset()


def node(stack: Stack, name: str) -> Node:
    return next(n for n in stack.nodes if n.name == name)


def routes(stack: Stack) -> dict[str, Any]:
    doc: dict[str, Any] = http_json(f"{stack.sidecar_url}/api/v1/internal/routes/finney")
    return doc


def upstream(doc: dict[str, Any], n: Node) -> dict[str, Any]:
    return next(u for u in doc["upstreams"] if u["id"] == endpoint_id(n.url))


async def until_routed(stack: Stack, what: str, pred: Any, timeout: float = 20.0) -> Any:
    """Until the sidecar's snapshot satisfies ``pred`` and the proxy has
    applied a snapshot made after that (``until_applied``: a positive signal);
    the snapshot then."""
    await wait_until(lambda: pred(routes(stack)), timeout, what)
    await until_applied(stack)
    doc = routes(stack)
    assert pred(doc), doc  # still so
    return doc


def state_reads_by_proxy(n: Node, since: float) -> list[dict[str, Any]]:
    return [
        a
        for a in n.arrivals(since)
        if a["agent"] == "chainproxy" and any(m in STATE for m in a["methods"])
    ]


async def learn_hash(stack: Stack, height: int, ip: str) -> str:
    """The block's hash, asked through the proxy: it learns the block's height."""
    r = await post(stack.rpc_url(), call("chain_getBlockHash", [height]), client_ip=ip)
    assert r.status == 200 and isinstance(r.body["result"], str), r.body
    return str(r.body["result"])


async def test_a_pruned_node_is_never_asked_for_state_it_discarded(hstack: Stack) -> None:
    lite, full = node(hstack, "lite"), node(hstack, "full")
    doc = await until_routed(
        hstack,
        "lite is measured pruned and full an archive",
        lambda d: (
            upstream(d, lite)["horizon_lost"] is not None
            and upstream(d, lite)["horizon_lost"] >= d["tip"] - 256
            and upstream(d, full)["horizon"] == 0
        ),
    )
    # the probes, not the config: lite is configured archive, full is not
    assert upstream(doc, lite)["archive"] is False and upstream(doc, full)["archive"] is True
    tip, ip = doc["tip"], next_client_ip()
    since = time.time()
    served: dict[str, int] = {}
    for depth in (300, 500, 1000, 1500, 2000):
        block_hash = await learn_hash(hstack, tip - depth, ip)
        for method, params in (("state_getStorage", [KEY, block_hash]), (STATE[1], [block_hash])):
            r = await post(hstack.rpc_url(), call(method, params), client_ip=ip)
            assert r.status == 200 and "result" in r.body, r.body
            upstream_id = r.headers["X-Chainproxy-Upstream"]
            served[upstream_id] = served.get(upstream_id, 0) + 1
            assert upstream_id != endpoint_id(lite.url)
    assert sum(served.values()) == 10
    done = time.time()
    # the node's log records state reads: the sidecar's own state checks come
    # on (a positive signal that the count below is not blind) ...
    await wait_until(
        lambda: any(
            a["agent"] != "chainproxy" and "state_getStorage" in a["methods"]
            for a in lite.arrivals(since)
        ),
        10,
        "the sidecar's state checks of lite",
    )
    # ... and none of the proxy's reads of old state reached it
    assert [a for a in state_reads_by_proxy(lite, since) if a["t"] <= done] == []
    # the JSON API and Metagraphed's endpoint objects say the same
    rows = http_json(f"{hstack.sidecar_url}/api/v1/endpoints/root")["rows"]
    by_id = {r["id"]: r for r in rows}
    assert by_id[endpoint_id(full.url)]["horizon"]["model"] == "archive"
    lite_row = by_id[endpoint_id(lite.url)]
    assert lite_row["archive"] is False and lite_row["horizon"]["earliest"] >= tip - 64
    mg = http_json(f"{hstack.sidecar_url}/api/v1/endpoints")["data"]["endpoints"]
    support = {r["id"]: r["archive_support"] for r in mg}
    assert support[endpoint_id(lite.url)] is False and support[endpoint_id(full.url)] is True


async def test_a_node_wrongly_believed_to_hold_a_block_is_corrected_and_the_client_answered(
    hstack: Stack,
) -> None:
    shrinking, full, lite = node(hstack, "shrinking"), node(hstack, "full"), node(hstack, "lite")
    full.control(
        lag=5
    )  # lagging (a worse tier): of the two holding old blocks, shrinking goes first
    doc = await until_routed(
        hstack,
        "shrinking is measured to hold blocks 1000 deep, and full lags",
        lambda d: (
            (h := upstream(d, shrinking)["horizon"]) is not None
            and h <= d["tip"] - 1000
            and upstream(d, full)["tier"] == 1
        ),
    )
    ip = next_client_ip()
    block = upstream(doc, shrinking)["horizon"] + 20  # inside its measured horizon
    block_hash = await learn_hash(hstack, block, ip)
    # the proxy's snapshot is at least as new as ``doc`` (a horizon only moves
    # down as more is found, or up a block every 2 s: block stays inside)
    await until_applied(hstack)
    shrinking.control(state_keep=64)  # it now keeps far less than the sidecar measured
    since = time.time()
    r = await post(hstack.rpc_url(), call("state_getStorage", [KEY, block_hash]), client_ip=ip)
    assert r.status == 200 and "result" in r.body, r.body  # the client got the answer
    assert r.headers["X-Chainproxy-Upstream"] == endpoint_id(full.url)
    # shrinking, then full, within one deadline
    assert r.headers["X-Chainproxy-Attempts"] == "2", (block, shrinking.arrivals(since))
    assert len(state_reads_by_proxy(shrinking, since)) == 1
    # corrected at once: an older block is not asked of it again
    older = await learn_hash(hstack, block - 3, ip)
    r = await post(hstack.rpc_url(), call("state_getStorage", [KEY, older]), client_ip=ip)
    assert r.status == 200 and "result" in r.body and r.headers["X-Chainproxy-Attempts"] == "1"
    assert len(state_reads_by_proxy(shrinking, since)) == 1
    assert state_reads_by_proxy(lite, since) == []
    # reported to the sidecar, whose next probe of shrinking checks that block
    await wait_until(
        lambda: (
            (lost := upstream(routes(hstack), shrinking)["horizon_lost"]) is not None
            and lost >= block
        ),
        20,
        "the sidecar learned that shrinking lost the block",
    )


async def test_a_block_no_node_holds_is_one_typed_error(hstack: Stack) -> None:
    full = node(hstack, "full")
    full.control(state_keep=256)  # the archive is pruned now: nobody holds block 1
    await until_routed(
        hstack,
        "no node is measured to hold block 1, and full's horizon is known again",
        lambda d: (
            all(u["horizon_lost"] is not None and u["horizon_lost"] >= 1 for u in d["upstreams"])
            # while the sidecar measures it anew, full's horizon is unknown and the
            # oldest block held would be the shallow nodes' only
            and upstream(d, full)["horizon"] is not None
        ),
    )
    ip = next_client_ip()
    block_hash = await learn_hash(hstack, 1, ip)
    since = time.time()
    r = await post(
        hstack.rpc_url(), call("state_getStorage", [KEY, block_hash], id_=11), client_ip=ip
    )
    assert r.status == 200, r.body
    error = r.body["error"]
    assert r.body["id"] == 11 and error["code"] == 4003
    data = error["data"]
    assert (data["policy"], data["block"]) == ("state_unavailable", 1)
    # the oldest block a node holds, as far as the proxy knows: never older than
    # any node's real window (shrinking keeps 2000 blocks, or 64 after the test
    # before; full 256; lite 64), and full's window is among them
    oldest, tip = data["oldest_block"], routes(hstack)["tip"]
    assert isinstance(oldest, int) and tip - 2002 <= oldest <= tip - 200, (oldest, tip)
    assert all(state_reads_by_proxy(n, since) == [] for n in hstack.nodes)  # nobody was asked
