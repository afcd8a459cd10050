"""Health- and block-height-aware routing end to end: the sidecar probes real
simulated nodes, publishes the snapshot, and the addon's choices follow it."""

from __future__ import annotations

import asyncio
import re
import socket
import time
import urllib.error
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from common.endpoint_id import endpoint_id
from tests.e2e.harness import Node, Stack, http_json
from tests.e2e.helpers import build_stack, call, next_client_ip, post, wait_until

pytestmark = pytest.mark.e2e

FAST_PROBES = {
    "probe": {
        "interval_s": 1,
        "head_interval_s": 0.5,
        # a dead node refuses at once; a probe waits this long only on a stall
        # of the machine, which must not turn a synced node unhealthy
        "timeout_s": 3,
        "fail_threshold": 2,
        "recover_threshold": 2,
    },
    "networks": {"finney": {"max_lag_blocks": 3}},
}
# A method the probes never call, so node counters show proxy traffic only.
METHOD = "system_properties"


@pytest.fixture(scope="module")
def rstack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # Routing itself is measured here (calls per node): identical calls sprayed at
    # once must each go upstream, so sharing and hedging are off for this stack.
    s = build_stack(
        tmp_path_factory.mktemp("routing"),
        ("alpha", "beta", "archive-gamma"),
        top=FAST_PROBES,
        coalesce={"enabled": False},
        hedge={"enabled": False},
    )
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def _reset(rstack: Stack) -> Iterator[None]:
    yield
    for n in rstack.nodes:
        if n.proc.alive():
            n.reset()


def snapshot(stack: Stack) -> dict[str, Any]:
    return http_json(f"{stack.sidecar_url}/api/v1/internal/routes/finney")


async def wait_for(stack: Stack, node: Node, pred: Any, timeout: float = 20.0) -> dict[str, Any]:
    """Until the sidecar's view of ``node`` satisfies ``pred``; its entry. The
    addon picks the snapshot up at its next refresh: ``until_applied`` waits for
    that, the tests do not sleep."""
    eid = endpoint_id(node.url)

    def entry() -> dict[str, Any] | None:
        found = next(u for u in snapshot(stack)["upstreams"] if u["id"] == eid)
        return found if pred(found) else None

    return await wait_until(  # type: ignore[no-any-return]
        entry, timeout, f"the sidecar reports the expected state for {node.name}", step=0.2
    )


def served(node: Node) -> int:
    return node.state()["calls"].get(METHOD, 0)


async def spray(stack: Stack, n: int, clients: int = 4) -> list[Any]:
    ips = [next_client_ip() for _ in range(clients)]

    async def one(i: int) -> Any:
        return await post(stack.rpc_url(), call(METHOD, id_=i), client_ip=ips[i % clients])

    replies = []
    for start in range(0, n, clients):  # a few at a time: in-flight stays low
        replies += await asyncio.gather(*(one(i) for i in range(start, min(n, start + clients))))
    assert all(r.status == 200 and "result" in r.body for r in replies)
    return replies


async def spray_at(stack: Stack, node: Node, n: int) -> tuple[int, int]:
    """``n`` calls: how many ``node`` served, and how many calls took more than one
    attempt (a node failed or timed out, on a loaded machine too: a failover may
    rightly land on a lagging node when the synced ones did not answer)."""
    before = served(node)
    replies = await spray(stack, n)
    return served(node) - before, sum(r.headers["X-Chainproxy-Attempts"] != "1" for r in replies)


async def spray_while_steady(stack: Stack, node: Node, n: int, rounds: int = 3) -> tuple[int, int]:
    """``spray_at`` once the addon has the sidecar's view, in a stretch where that
    view held still: ``node`` in tier 1 and another node in tier 0 in each
    of the sidecar's snapshots, read every 0.1 s from before the addon's
    refresh to the last call. A probe that times out on a loaded machine turns
    a synced node unhealthy, and the tip is then the lagging node's own best:
    it is rightly the node to call then. Such a stretch is sprayed again (up
    to ``rounds`` times); the premise never holding is a failure of its own."""
    eid = endpoint_id(node.url)
    seen: list[str] = []

    async def watch(stop: asyncio.Event) -> None:
        while not stop.is_set():
            doc = await asyncio.to_thread(snapshot, stack)
            tiers = {u["id"]: u["tier"] for u in doc["upstreams"]}
            others = [t for uid, t in tiers.items() if uid != eid]
            if tiers.get(eid) != 1 or 0 not in others:  # no synced node to prefer
                seen.append(str(tiers))
            await asyncio.sleep(0.1)

    for _ in range(rounds):
        seen.clear()
        stop = asyncio.Event()
        watcher = asyncio.create_task(watch(stop))
        try:
            await asyncio.sleep(0)  # the watcher's first read precedes the refresh
            await until_applied(stack)
            got = await spray_at(stack, node, n)
        finally:
            stop.set()
            await watcher
        if not seen:
            return got
    raise AssertionError(f"the sidecar's view never held still for {rounds} sprays: {seen}")


async def until_applied(stack: Stack, timeout: float = 40.0) -> None:
    """Until the addon has applied a snapshot the sidecar made after this call
    (the one a test just saw in the sidecar's, or a later one): the sidecar
    finalizes one more block, and the proxy caches that block's hash, which it
    does only once its own snapshot has the block final (asked again: a HIT).
    Routing by the traffic would not tell: a node may get no call by chance."""
    now = snapshot(stack)["finalized"] or 0

    def finalized_after() -> int | None:
        fin = snapshot(stack)["finalized"]
        return fin if fin is not None and fin > now else None

    block = await wait_until(finalized_after, 20, "the sidecar finalizes a block more", step=0.2)

    async def cached() -> bool:
        r = await post(stack.rpc_url(), call("chain_getBlockHash", [block]))
        return r.status == 200 and r.headers.get("X-Cache") == "HIT"

    await wait_until(cached, timeout, f"the proxy's snapshot has block {block} final", step=0.2)


async def test_a_lagging_node_gets_no_traffic_until_it_catches_up(rstack: Stack) -> None:
    lagging = rstack.nodes[0]
    await wait_for(rstack, lagging, lambda u: u["tier"] == 0)
    lagging.control(lag=10)
    entry = await wait_for(rstack, lagging, lambda u: u["tier"] == 1)
    # lag=10 as probed: heads are read at slightly different moments, so allow some skew.
    assert entry["lag"] >= 8 and entry["synced"] is False and entry["healthy"] is True
    got, failed_over = await spray_while_steady(rstack, lagging, 60)
    assert got <= failed_over, f"a lagging node got {got} calls ({failed_over} failed over)"

    lagging.control(lag=0)
    await wait_for(rstack, lagging, lambda u: u["tier"] == 0)

    async def served_again() -> bool:
        before = served(lagging)
        await spray(rstack, 30)
        return served(lagging) > before

    await wait_until(served_again, 30, "the node gets traffic back after catching up", step=0.2)


async def test_a_slow_node_gets_clearly_less_than_an_equal_share(rstack: Stack) -> None:
    slow = rstack.nodes[1]
    slow.control(latency_ms=300)
    counts = [served(n) for n in rstack.nodes]
    replies = await spray(rstack, 120)
    got = [served(n) - c for n, c in zip(rstack.nodes, counts, strict=True)]
    # each call reached a node, and no node got a call the proxy did not attempt
    # (a call that timed out on a loaded machine, attempt_timeout_s 1, and
    # failed over reaches two nodes: each attempt counts)
    attempts = sum(int(r.headers["X-Chainproxy-Attempts"]) for r in replies)
    assert 120 <= sum(got) <= attempts, (got, attempts)
    assert got[1] < 120 / 3 / 2, f"slow node share {got}"


async def test_a_dead_node_is_probed_dead_and_avoided(tmp_path_factory: Any) -> None:
    stack = build_stack(  # attempts counted at the nodes: no sharing, no hedging (as rstack)
        tmp_path_factory.mktemp("dead"),
        ("alpha", "beta", "gamma"),
        top=FAST_PROBES,
        coalesce={"enabled": False},
        hedge={"enabled": False},
    )
    try:
        victim = stack.nodes[2]
        live = stack.nodes[:2]
        await wait_for(stack, victim, lambda u: u["tier"] == 0)
        victim.proc.stop()
        # One failed probe is not enough (flap damping): fail_threshold=2 of them are.
        entry = await wait_for(
            stack, victim, lambda u: u["classification"] == "dead" and u["status"] == "Degraded"
        )
        assert entry["tier"] == 3 and entry["healthy"] is False
        vid = endpoint_id(victim.url)

        async def attempts_on_the_dead(n: int) -> tuple[int, list[Any]]:
            """Of ``n`` calls' attempts, those not received by a live node: the
            ones that met the dead one (a failover between live nodes, a timeout
            on a loaded machine, is received by both)."""
            before = sum(served(node) for node in live)
            replies = await spray(stack, n)
            attempts = sum(int(r.headers["X-Chainproxy-Attempts"]) for r in replies)
            return attempts - (sum(served(node) for node in live) - before), replies

        await until_applied(stack)  # the addon's snapshot refresh
        dead_attempts, replies = await attempts_on_the_dead(40)
        assert dead_attempts == 0, [dict(r.headers) for r in replies]
        assert vid not in {r.headers["X-Chainproxy-Upstream"] for r in replies}
        detail = http_json(f"{stack.sidecar_url}/api/v1/endpoints/{vid}")
        assert (
            detail["classification"] == "dead" and detail["probes"][0]["classification"] == "dead"
        )
    finally:
        stack.stop()


STORAGE_KEY = "0x26aa394eea5630e07c48ae0c9558cef702a5c1b19ab7a04f536c519aca4983ac"


async def test_state_older_than_the_pruning_window_is_served_by_the_archive(
    rstack: Stack,
) -> None:
    archive = rstack.nodes[2]
    await wait_for(rstack, archive, lambda u: u["archive"] is True and u["tier"] == 0)
    ip = next_client_ip()
    await until_applied(rstack)  # the addon's snapshot refresh: the tip, the archive
    # Unknown hash: a pruned node may answer first; the call fails over to the archive.
    old_hash = rstack.nodes[0].rpc("chain_getBlockHash", [10])["result"]
    for i in range(5):  # distinct keys: a repeated one would be a cache hit
        key = f"{STORAGE_KEY}{i:02x}"
        r = await post(rstack.rpc_url(), call("state_getStorage", [key, old_hash], i), client_ip=ip)
        assert r.status == 200 and "error" not in r.body, r.body
        assert r.headers["X-Chainproxy-Upstream"] == endpoint_id(archive.url)
    # Known hash (learned from chain_getBlockHash through the proxy): archive first.
    r = await post(rstack.rpc_url(), call("chain_getBlockHash", [20]), client_ip=ip)
    old_hash = r.body["result"]
    r = await post(
        rstack.rpc_url(), call("state_getStorage", [STORAGE_KEY, old_hash]), client_ip=ip
    )
    assert r.status == 200 and "error" not in r.body
    assert r.headers["X-Chainproxy-Upstream"] == endpoint_id(archive.url)
    assert r.headers["X-Chainproxy-Attempts"] == "1"


async def test_block_above_a_nodes_best_goes_to_one_that_has_it(rstack: Stack) -> None:
    behind = rstack.nodes[0]
    behind.control(lag=2)  # within max_lag: still tier 0, but its best is known lower
    await wait_for(rstack, behind, lambda u: u["lag"] is not None and u["lag"] >= 2)
    await until_applied(rstack)  # the addon's snapshot refresh: behind's best
    tip = snapshot(rstack)["tip"]
    ip = next_client_ip()
    for i in range(10):
        r = await post(rstack.rpc_url(), call("chain_getBlockHash", [tip], i), client_ip=ip)
        assert r.status == 200 and r.body["result"] is not None
        assert r.headers["X-Chainproxy-Upstream"] != endpoint_id(behind.url)


async def test_proxy_keeps_serving_without_the_sidecar_and_resumes_its_snapshot(
    tmp_path_factory: Any,
) -> None:
    stack = build_stack(  # calls per node measured: no sharing, no hedging (as rstack)
        tmp_path_factory.mktemp("nosidecar"),
        ("alpha", "beta", "gamma"),
        top=FAST_PROBES,
        coalesce={"enabled": False},
        hedge={"enabled": False},
    )
    try:
        assert stack.sidecar is not None
        # the proxy has had a snapshot (its first refresh may still be on the
        # way when mitmdump answers; the sidecar's stop must not beat it)
        stack.wait_snapshot_applied()
        stack.sidecar.stop()
        await spray(stack, 30)
        # a balancer's check of the proxy itself: 200 without the sidecar
        # (/healthz is the sidecar's: 502 while it is down)
        health = http_json(f"{stack.proxy_url}/rpc/healthz")
        assert health["status"] == "ok"
        assert health["networks"]["finney"] == {"nodes": 3, "usable": 3}
        # and it says it routes on the last snapshot it had, aging
        down = health["snapshot"]["finney"]
        assert down["applied"] >= 1 and down["age_s"] is not None
        # a HEAD: the GET's length, and not one byte of body after the head
        # (mitmproxy sends whatever content a response has; a client then
        # reads it as the next answer's status line). ``age_s`` grows meanwhile
        # (9.9 -> 10.0 is one byte more): the GET's just before or just after.
        before = await _get_length(f"{stack.proxy_url}/rpc/healthz")
        got = await asyncio.to_thread(_raw_head, stack.proxy_url, "/rpc/healthz")
        head, _, rest = got.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and rest == b"", got
        length = int(re.search(rb"(?i)content-length: (\d+)", head).group(1))  # type: ignore[union-attr]
        after = await _get_length(f"{stack.proxy_url}/rpc/healthz")
        assert length in (before, after), (before, length, after)
        with pytest.raises(urllib.error.HTTPError) as sidecars:
            http_json(f"{stack.proxy_url}/healthz")
        assert sidecars.value.code == 502
        stack.start_sidecar()  # same config and data_dir
        lagging = stack.nodes[1]
        lagging.control(lag=10)
        await wait_for(stack, lagging, lambda u: u["tier"] == 1, timeout=30)
        # the addon's back-off while the sidecar was down is capped (10 s): until
        # its next refresh has the new snapshot, and then it holds
        got, failed_over = await spray_while_steady(stack, lagging, 45)
        assert got <= failed_over, f"the lagging node got {got} calls ({failed_over} failed over)"
        back = http_json(f"{stack.proxy_url}/rpc/healthz")["snapshot"]["finney"]
        assert back["applied"] > down["applied"] and back["age_s"] < 30, (down, back)
    finally:
        stack.stop()


async def _get_length(url: str) -> int:
    """The length of a GET's 200 answer."""
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        assert r.status == 200
        return len(await r.read())


def _raw_head(base: str, path: str) -> bytes:
    """Every byte the proxy sends within half a second of a HEAD."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(f"HEAD {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        got = b""
        deadline = time.monotonic() + 0.5
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                break
            got += chunk
        return got
