"""``chain_getHead`` answered by the proxy from a live new-heads subscription
(``addon/subs/head_watch.py``), through the real mitmdump + addon to simulated
nodes that serve subscriptions: askers that come back get a subscription of the
proxy's own, their heads then cost the nodes nothing and still follow the
chain, and the subscription goes once nobody asks. With
``head_pinning.pin_headers``, a poller of the best block's header
(``chain_getHeader`` without a hash) gets it pinned to the same head: one node
call a block, the rest from the cache."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import Stack, http_json
from tests.e2e.helpers import build_stack, call, node_calls, post, wait_until

pytestmark = pytest.mark.e2e

# A block every 2 s: the assertions below allow a head one block behind the
# node's (its notification in flight), so a stall of the machine under a block
# time (the node's clock moves on while its pushes wait) must not fail them.
BLOCK_S = 2.0
LINGER_S = 1.0


def build(tmp: Path) -> Stack:
    return build_stack(
        tmp,
        ("alpha", "beta"),
        top={"probe": {"interval_s": 2, "head_interval_s": 1, "timeout_s": 2}},
        wss=True,
        block_time=BLOCK_S,
        websocket={"stall_s": 3 * BLOCK_S, "upstream_linger_s": LINGER_S},
        head_pinning={"pin_headers": True},
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = build(tmp_path_factory.mktemp("heads"))
    yield s
    s.stop()


def node_heads(stack: Stack) -> int:
    """chain_getHead calls the nodes answered."""
    return sum(n.state()["calls"].get("chain_getHead", 0) for n in stack.nodes)


def subscriptions(stack: Stack) -> int:
    return sum(n.state()["subscriptions"] for n in stack.nodes)


def height_of(stack: Stack, block_hash: str) -> int:
    header = http_json(stack.nodes[0].url, call("chain_getHeader", [block_hash]))["result"]
    return int(header["number"], 16)


async def get_head(stack: Stack, id_: Any = 1) -> tuple[str, str]:
    r = await post(stack.rpc_url(), call("chain_getHead", [], id_))
    assert r.status == 200 and r.body["id"] == id_, r.raw
    return r.body["result"], r.headers.get("X-Cache", "")


async def test_askers_get_the_head_from_a_subscription_and_it_follows_the_chain(
    stack: Stack,
) -> None:
    await wait_until(lambda: subscriptions(stack) == 0, 10, "no subscription left over")
    # asked twice within the linger: the second asker starts the proxy's own subscription
    await get_head(stack)
    await get_head(stack)

    async def answered_here() -> bool:
        return (await get_head(stack))[1] == "HIT"

    await wait_until(answered_here, 10, "chain_getHead answered by the proxy")
    assert subscriptions(stack) == 1  # one new-heads subscription, on one node
    before = node_heads(stack)
    seen: set[str] = set()
    asked = misses = 0
    deadline = time.monotonic() + 3.5 * BLOCK_S
    while time.monotonic() < deadline:
        best = stack.nodes[0].state()["best"]  # the node's best block, just before asking
        head, cache = await get_head(stack, id_=len(seen))
        asked += 1
        # A MISS is by design when the probes saw a block before its notification
        # reached the proxy (``HeadBook.fresh``: a newer tip than the head): a node
        # answers that one. It lasts until the notification, a few ms on a quiet
        # machine, so one block's race catches one ask at most.
        misses += cache != "HIT"
        # never older than the block before the node's best (a notification may be
        # a few ms behind the block it announces)
        assert height_of(stack, head) >= best - 1, (head, best)
        seen.add(head)
        await asyncio.sleep(0.1)
    assert misses <= 3 and misses < asked, (asked, misses)
    assert node_heads(stack) == before + misses  # the nodes were asked for those alone
    assert len(seen) >= 3  # and the answers moved with the chain


async def test_a_poller_of_the_best_header_costs_the_nodes_one_call_a_block(
    stack: Stack,
) -> None:
    async def get_header(id_: int = 1) -> Any:
        r = await post(stack.rpc_url(), call("chain_getHeader", [], id_))
        assert r.status == 200 and r.body["id"] == id_, r.raw
        return r

    await get_head(stack)
    await get_head(stack)  # asked again within the linger: the proxy subscribes

    async def pinned() -> bool:
        return (await get_header()).headers.get("X-Chainproxy-Pinned") not in (None, "missed")

    await wait_until(pinned, 10, "chain_getHeader pinned to the followed head")
    since = time.time()
    polls = hits = unpinned = 0
    numbers: set[int] = set()
    deadline = time.monotonic() + 3.5 * BLOCK_S
    while time.monotonic() < deadline:
        best = stack.nodes[0].state()["best"]
        r = await get_header(id_=polls)
        polls += 1
        number = int(r.body["result"]["number"], 16)
        assert number >= best - 1, (number, best)  # the chain's head, as a node has it
        pin = r.headers.get("X-Chainproxy-Pinned")
        if pin not in (None, "missed"):
            # the header of the very block it was pinned to
            assert (
                http_json(stack.nodes[0].url, call("chain_getHeader", [pin]))["result"]
                == (r.body["result"])
            )
        hits += r.headers.get("X-Cache") == "HIT"
        unpinned += pin in (None, "missed")
        numbers.add(number)
        await asyncio.sleep(0.05)
    calls = node_calls(stack, "chain_getHeader", since)
    assert len(numbers) >= 3  # the answers moved with the chain
    # a node call for the first poll of each block (and a poll now and then that
    # the probes' newer tip sends as it came); every other poll is a cache hit
    assert calls <= polls - hits + unpinned + 2, (calls, polls, hits, unpinned)
    assert hits >= polls // 2 and calls <= len(numbers) + unpinned + 3, (calls, polls, hits)


async def test_the_subscription_goes_once_nobody_asks_and_nodes_answer_again(
    stack: Stack,
) -> None:
    await get_head(stack)
    await get_head(stack)
    await wait_until(lambda: subscriptions(stack) == 1, 10, "the proxy's subscription")
    # nobody asks: the watch lets go after its linger, the hub after its own
    await wait_until(lambda: subscriptions(stack) == 0, 5 * LINGER_S + 5, "the subscription gone")
    before = node_heads(stack)
    head, cache = await get_head(stack)
    assert cache != "HIT" and node_heads(stack) == before + 1
    assert head == http_json(stack.nodes[0].url, call("chain_getHead"))["result"] or (
        height_of(stack, head) >= stack.nodes[0].state()["best"] - 1
    )


async def test_the_node_under_the_subscription_dies_and_heads_still_follow_the_chain(
    tmp_path: Path,
) -> None:
    stack = build(tmp_path)  # its own: this test kills a node
    try:
        await get_head(stack)
        await get_head(stack)

        async def answered_here() -> bool:
            return (await get_head(stack))[1] == "HIT"

        await wait_until(answered_here, 10, "chain_getHead answered by the proxy")
        (holder,) = [n for n in stack.nodes if n.state()["subscriptions"]]
        (other,) = [n for n in stack.nodes if n is not holder]
        holder.proc.signal_group(signal.SIGKILL)  # a crash: no close frame
        holder.proc.popen.wait(10)
        hits, seen = 0, set()
        deadline = time.monotonic() + 4 * BLOCK_S
        while time.monotonic() < deadline:
            best = other.state()["best"]
            head, cache = await get_head(stack)  # never an error: moved, or asked of a node
            header = http_json(other.url, call("chain_getHeader", [head]))["result"]
            assert int(header["number"], 16) >= best - 1, (head, best)
            hits += cache == "HIT"
            seen.add(head)
            await asyncio.sleep(0.1)
        assert len(seen) >= 3
        assert other.state()["subscriptions"] == 1 and hits > 0  # the subscription moved
    finally:
        stack.stop()
