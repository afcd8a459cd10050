"""``chainHead_v1_*`` served by chainproxy itself, over the raw protocol,
through the real mitmdump + addon to simulated nodes (node-wss endpoints):
the events' order and shapes, every operation, pins, limits, follows that
share the nodes' subscriptions, and a follow that does not notice the death
of the node under it. Everything on 127.0.0.1, every wait bounded."""

from __future__ import annotations

import asyncio
import hashlib
import json
import signal
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import aiohttp
import pytest

from tests.e2e.harness import Node, Stack, base_config
from tests.e2e.helpers import (
    PROXY_DEFAULTS,
    Client,
    call,
    next_client_ip,
    post,
    sidecar_routes,
    wait_until,
    with_wss,
)

pytestmark = pytest.mark.e2e

BLOCK_S = 1.0
NUMBER_KEY = "0x26aa394eea5630e07c48ae0c9558cef702a5c1b19ab7a04f536c519aca4983ac"  # System.Number


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("chainhead")
    s = Stack(tmp)
    epoch = time.time() - 600
    try:
        for name in ("alpha", "beta", "gamma"):
            s.start_node(name, epoch=epoch, block_time=BLOCK_S)
        websocket = {"stall_s": 3, "upstream_linger_s": 1, "max_subscriptions": 30}
        new_spec = {"follows_per_socket": 2, "operations": 4, "storage_page_items": 2}
        config = base_config(
            tmp,
            s.nodes,
            top={"probe": {"interval_s": 2, "head_interval_s": 1, "timeout_s": 2}},
            **{**PROXY_DEFAULTS, "websocket": websocket, "new_spec": new_spec},
        )
        s.write_config(with_wss(config))
        s.start_sidecar()
        s.start_proxy()
    except BaseException:
        s.stop()
        raise
    yield s
    s.stop()


@asynccontextmanager
async def client(stack: Stack) -> AsyncIterator[Client]:
    connector = aiohttp.TCPConnector(local_addr=(next_client_ip(), 0))
    async with aiohttp.ClientSession(connector=connector) as s:
        url = stack.rpc_url().replace("http://", "ws://")
        async with s.ws_connect(url, timeout=aiohttp.ClientWSTimeout(10)) as ws:
            c = Client(ws)
            yield c
            c._reader.cancel()


def events(c: Client, sid: str, kind: str | None = None) -> list[dict[str, Any]]:
    return [e for e in c.notes.get(sid, []) if kind is None or e["event"] == kind]


async def wait_events(c: Client, sid: str, kind: str, count: int, timeout: float = 20) -> None:
    await wait_until(lambda: len(events(c, sid, kind)) >= count, timeout, f"{count} {kind} events")


async def follow(c: Client, with_runtime: bool = True) -> str:
    answer = await c.ask("chainHead_v1_follow", [with_runtime])
    sid = answer["result"]
    assert isinstance(sid, str), answer
    await wait_events(c, sid, "initialized", 1)
    return sid


def check_order(evs: list[dict[str, Any]]) -> set[str]:
    """The spec's order: initialized first; each newBlock's parent already
    known; best and finalized blocks known; pruned ones known. The blocks
    known at the end."""
    assert evs[0]["event"] == "initialized", evs[0]
    known = set(evs[0]["finalizedBlockHashes"])
    assert len(known) >= 1
    for e in evs[1:]:
        kind = e["event"]
        assert kind != "stop", evs
        if kind == "newBlock":
            assert e["parentBlockHash"] in known, e
            assert e["blockHash"] not in known, e
            known.add(e["blockHash"])
        elif kind == "bestBlockChanged":
            assert e["bestBlockHash"] in known, e
        elif kind == "finalized":
            assert all(h in known for h in e["finalizedBlockHashes"]), e
            assert all(h in known for h in e["prunedBlockHashes"]), e
    return known


async def number_of(stack: Stack, block_hash: str) -> int:
    r = await post(stack.rpc_url(), call("chain_getHeader", [block_hash]))
    return int(r.body["result"]["number"], 16)


async def test_events_come_in_the_specs_order_with_the_runtime(stack: Stack) -> None:
    async with client(stack) as c:
        sid = await follow(c)
        await wait_events(c, sid, "finalized", 2)
        evs = events(c, sid)
        check_order(evs)
        runtime = evs[0]["finalizedBlockRuntime"]
        assert runtime["type"] == "valid"
        assert isinstance(runtime["spec"]["specVersion"], int)
        assert all(isinstance(v, int) for v in runtime["spec"]["apis"].values())
        new = events(c, sid, "newBlock")
        assert new and all("newRuntime" in e for e in new)
        # the hashes are the chain's: each newBlock is that height's block on the nodes
        for e in new[-3:]:
            n = await number_of(stack, e["blockHash"])
            r = await post(stack.nodes[0].url, call("chain_getBlockHash", [n]))
            assert r.body["result"] == e["blockHash"]


async def test_without_runtime_no_runtime_is_sent(stack: Stack) -> None:
    async with client(stack) as c:
        sid = await follow(c, with_runtime=False)
        await wait_events(c, sid, "newBlock", 1)
        assert "finalizedBlockRuntime" not in events(c, sid)[0]
        assert all("newRuntime" not in e for e in events(c, sid, "newBlock"))
        # and a runtime call on it is the spec's -32802, not an operation
        block = events(c, sid)[0]["finalizedBlockHashes"][-1]
        call = await c.ask("chainHead_v1_call", [sid, block, "Core_version", "0x"])
        assert call["error"]["code"] == -32802
        # also while its operations fill every slot: a free slot would not help
        items = [{"key": NUMBER_KEY + f"{i:02x}", "type": "value"} for i in range(4)]
        started = (await c.ask("chainHead_v1_storage", [sid, block, items, None]))["result"]
        op = started["operationId"]
        await wait_until(
            lambda: any(e.get("operationId") == op for e in events(c, sid)), 15, "a first page"
        )
        full = await c.ask("chainHead_v1_body", [sid, block])
        assert full["result"] == {"result": "limitReached"}
        call = await c.ask("chainHead_v1_call", [sid, block, "Core_version", "0x"])
        assert call["error"]["code"] == -32802


async def test_operations_answer_what_the_legacy_calls_answer(stack: Stack) -> None:
    async with client(stack) as c:
        sid = await follow(c)
        block = events(c, sid)[0]["finalizedBlockHashes"][-1]
        header = (await c.ask("chainHead_v1_header", [sid, block]))["result"]
        assert (
            "0x" + hashlib.blake2b(bytes.fromhex(header[2:]), digest_size=32).hexdigest() == block
        )

        legacy = (await post(stack.rpc_url(), call("chain_getBlock", [block]))).body["result"]
        started = (await c.ask("chainHead_v1_body", [sid, block]))["result"]
        assert started["result"] == "started"
        done = await _op_end(c, sid, started["operationId"])
        assert done["event"] == "operationBodyDone"
        assert done["value"] == legacy["block"]["extrinsics"]

        want = await post(stack.rpc_url(), call("state_call", ["Core_version", "0x", block]))
        started = (await c.ask("chainHead_v1_call", [sid, block, "Core_version", "0x"]))["result"]
        done = await _op_end(c, sid, started["operationId"])
        assert done == {
            "event": "operationCallDone",
            "operationId": started["operationId"],
            "output": want.body["result"],
        }

        value = await post(stack.rpc_url(), call("state_getStorage", [NUMBER_KEY, block]))
        items = [{"key": NUMBER_KEY, "type": "value"}, {"key": NUMBER_KEY, "type": "hash"}]
        started = (await c.ask("chainHead_v1_storage", [sid, block, items, None]))["result"]
        assert started["discardedItems"] == 0
        done = await _op_end(c, sid, started["operationId"])
        assert done["event"] == "operationStorageDone"
        got = [
            i
            for e in events(c, sid, "operationStorageItems")
            if e["operationId"] == started["operationId"]
            for i in e["items"]
        ]
        raw = bytes.fromhex(value.body["result"][2:])
        assert {"key": NUMBER_KEY, "value": value.body["result"]} in got
        digest = "0x" + hashlib.blake2b(raw, digest_size=32).hexdigest()
        assert {"key": NUMBER_KEY, "hash": digest} in got


async def _op_end(c: Client, sid: str, op: str, timeout: float = 15) -> dict[str, Any]:
    ends = ("Done", "operationError", "operationInaccessible")

    def ended() -> dict[str, Any] | None:
        for e in events(c, sid):
            name = e["event"]
            if e.get("operationId") == op and (name.endswith(ends[0]) or name in ends[1:]):
                return e
        return None

    return await wait_until(ended, timeout, f"operation {op} ended")  # type: ignore[no-any-return]


async def test_pins_and_their_errors(stack: Stack) -> None:
    async with client(stack) as c:
        sid = await follow(c)
        fin = events(c, sid)[0]["finalizedBlockHashes"]
        block = fin[-1]
        unknown = "0x" + "ab" * 32
        bad = await c.ask("chainHead_v1_unpin", [sid, unknown])
        assert bad["error"]["code"] == -32801
        dup = await c.ask("chainHead_v1_unpin", [sid, [block, block]])
        assert dup["error"]["code"] == -32804
        assert (await c.ask("chainHead_v1_unpin", [sid, [block]]))["result"] is None
        again = await c.ask("chainHead_v1_header", [sid, block])
        assert again["error"]["code"] == -32801
        # a stale follow id: ignored / null / limitReached, as the spec says
        assert (await c.ask("chainHead_v1_unpin", ["nope", block]))["result"] is None
        assert (await c.ask("chainHead_v1_unpin", ["nope", [block, block]]))["result"] is None
        assert (await c.ask("chainHead_v1_unpin", [sid, []]))["result"] is None  # nothing to do
        assert (await c.ask("chainHead_v1_header", ["nope", block]))["result"] is None
        body = await c.ask("chainHead_v1_body", ["nope", block])
        assert body["result"] == {"result": "limitReached"}
        assert (await c.ask("chainHead_v1_unfollow", [sid]))["result"] is None
        assert (await c.ask("chainHead_v1_header", [sid, fin[0]]))["result"] is None


async def test_limits_refuse_as_the_spec_says(stack: Stack) -> None:
    async with client(stack) as c:
        sid = await follow(c)
        await follow(c)  # the second: follows_per_socket is 2
        third = await c.ask("chainHead_v1_follow", [True])
        assert third["error"]["code"] == -32800
        assert third["error"]["data"]["policy"] == "max_follows"
        block = events(c, sid)[0]["finalizedBlockHashes"][-1]
        # operations is 4: a storage read of 6 items takes 4 and discards 2
        items = [{"key": NUMBER_KEY + f"{i:02x}", "type": "value"} for i in range(6)]
        started = (await c.ask("chainHead_v1_storage", [sid, block, items, None]))["result"]
        assert started["result"] == "started" and started["discardedItems"] == 2
        # while it runs (its second page waits for a continue), nothing more fits
        await wait_until(
            lambda: any(e["event"] == "operationWaitingForContinue" for e in events(c, sid)),
            15,
            "the storage read waits for a continue",
        )
        full = await c.ask("chainHead_v1_body", [sid, block])
        assert full["result"] == {"result": "limitReached"}
        # an unknown operation: no effect, as the spec says (not an error)
        assert (await c.ask("chainHead_v1_continue", [sid, "no-such-op"]))["result"] is None
        # two continues at once: the first goes on, the second finds the
        # operation no longer waiting (the spec's -32803), not a second null
        params = [sid, started["operationId"]]
        batch = [call("chainHead_v1_continue", params, id_=f"go{i}") for i in (1, 2)]
        await c.ws.send_str(json.dumps(batch))
        await wait_until(lambda: {"go1", "go2"} <= set(c.answers), 10, "both continues answered")
        assert c.answers["go1"]["result"] is None
        assert c.answers["go2"]["error"]["code"] == -32803, c.answers["go2"]
        done = await _op_end(c, sid, started["operationId"])
        assert done["event"] == "operationStorageDone"
        body = (await c.ask("chainHead_v1_body", [sid, block]))["result"]
        assert body["result"] == "started"  # its slots are free again


async def test_over_http_chain_head_is_refused_with_the_websocket_reason(stack: Stack) -> None:
    r = await post(stack.rpc_url(), call("chainHead_v1_follow", [True]))
    assert r.status == 403
    assert r.body["error"]["data"]["policy"] == "allowlist"


def node_subscriptions(stack: Stack) -> dict[str, int]:
    return {n.name: n.state()["subscriptions"] for n in stack.nodes if n.proc.alive()}


async def test_twenty_follows_on_ten_sockets_share_two_upstream_subscriptions(
    stack: Stack,
) -> None:
    async with AsyncExitStack() as es:
        clients = [await es.enter_async_context(client(stack)) for _ in range(10)]
        sids = [await follow(c) for c in clients for _ in range(2)]
        assert len(set(sids)) == 20
        held = node_subscriptions(stack)
        # new heads and finalized heads, once each, whatever the number of follows
        assert sum(held.values()) <= 2, held


async def _followed(stack: Stack, c: Client) -> tuple[str, list[Node]]:
    """A follow two blocks in, and the nodes under the view's two upstream
    subscriptions (one or two)."""
    sid = await follow(c)
    await wait_events(c, sid, "newBlock", 2)
    held = await wait_until(
        lambda: (h := node_subscriptions(stack)) and sum(h.values()) == 2 and h,
        15,
        "the view's two upstream subscriptions",
    )
    holders = [n for n in stack.nodes if held.get(n.name)]
    assert holders, held
    return sid, holders


async def test_a_follow_does_not_notice_its_nodes_death(stack: Stack) -> None:
    async with client(stack) as c:
        sid, holders = await _followed(stack, c)
        seen = len(events(c, sid, "newBlock"))
        try:
            for n in holders:
                n.proc.signal_group(signal.SIGKILL)  # a crash: no close frame
                n.proc.popen.wait(10)
            await wait_events(c, sid, "newBlock", seen + 6, timeout=40)
            await wait_events(c, sid, "finalized", 3, timeout=20)
        finally:
            for n in holders:
                stack.restart_node(n)
        evs = events(c, sid)
        check_order(evs)
        # every height announced once, in order: no block missed (the best may
        # skip one: two heads taken in one step make the higher one best)
        news = [await number_of(stack, e["blockHash"]) for e in events(c, sid, "newBlock")]
        assert news == list(range(news[0], news[0] + len(news))), news
        best = [e["bestBlockHash"] for e in events(c, sid, "bestBlockChanged")]
        numbers = [await number_of(stack, h) for h in best]
        assert numbers == sorted(set(numbers)), numbers


@pytest.fixture(scope="module")
def solo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One node: a fork it takes and leaves is the whole network's reorg."""
    tmp = tmp_path_factory.mktemp("chainhead-solo")
    s = Stack(tmp)
    try:
        s.start_node("solo", epoch=time.time() - 600, block_time=BLOCK_S)
        config = base_config(
            tmp,
            s.nodes,
            top={"probe": {"interval_s": 2, "head_interval_s": 1, "timeout_s": 2}},
            **{**PROXY_DEFAULTS, "websocket": {"upstream_linger_s": 1}},
        )
        s.write_config(with_wss(config))
        s.start_sidecar()
        s.start_proxy()
    except BaseException:
        s.stop()
        raise
    yield s
    s.stop()


async def test_a_reorg_announces_the_new_fork_and_prunes_the_old(solo: Stack) -> None:
    node = solo.nodes[0]
    node.control(finality_lag=8)  # the fork stays unfinalized while it is the best chain
    try:
        async with client(solo) as c:
            sid = await follow(c)
            await wait_events(c, sid, "newBlock", 1)
            node.control(fork=True)
            fork_at = node.state()["fork_at"]
            assert isinstance(fork_at, int)

            async def fork_blocks() -> set[str]:
                """The blocks announced above the fork point (the node knows
                their numbers while it is on the fork)."""
                out = set()
                for e in events(c, sid, "newBlock"):
                    got = node.rpc("chain_getHeader", [e["blockHash"]])["result"]
                    if got and int(got["number"], 16) > fork_at:
                        out.add(e["blockHash"])
                return out

            forked = await wait_until(
                lambda: _at_least(fork_blocks(), 2), 20, "two of the fork's blocks announced"
            )
            node.control(fork=False)  # back to the main chain: a reorg
            node.control(finality_lag=2)  # ... which is then finalized past the fork

            def pruned() -> set[str]:
                return {h for e in events(c, sid, "finalized") for h in e["prunedBlockHashes"]}

            await wait_until(lambda: forked <= pruned(), 20, "the fork's blocks pruned")
            evs = events(c, sid)
            check_order(evs)
            best = events(c, sid, "bestBlockChanged")[-1]["bestBlockHash"]
            n = await number_of(solo, best)
            main = (await post(node.url, call("chain_getBlockHash", [n]))).body["result"]
            assert best == main  # the best block is the main chain's
            finalized = [h for e in events(c, sid, "finalized") for h in e["finalizedBlockHashes"]]
            assert not forked & set(finalized)
            # Pruned, and gone from the node, but still pinned by this follow:
            # its header is the one announced (the spec's null is for a stale
            # follow only), and an operation on it is "inaccessible" (trying
            # again may work), never an error that says it never will.
            gone = sorted(forked)[0]
            assert node.rpc("chain_getHeader", [gone])["result"] is None
            header = (await c.ask("chainHead_v1_header", [sid, gone]))["result"]
            assert isinstance(header, str), header
            digest = hashlib.blake2b(bytes.fromhex(header[2:]), digest_size=32).hexdigest()
            assert "0x" + digest == gone
            for method, params in (
                ("chainHead_v1_call", [sid, gone, "Core_version", "0x"]),
                ("chainHead_v1_storage", [sid, gone, [{"key": NUMBER_KEY, "type": "value"}], None]),
            ):
                started = (await c.ask(method, params))["result"]
                done = await _op_end(c, sid, started["operationId"])
                assert done["event"] == "operationInaccessible", (method, done)
    finally:
        node.control(fork=False, finality_lag=2)


async def test_call_parameters_may_be_empty_or_unprefixed(stack: Stack) -> None:
    """polkadot-api sends ``""`` for a call without parameters; Substrate's
    server reads hex with or without 0x."""
    async with client(stack) as c:
        sid = await follow(c)
        block = events(c, sid)[0]["finalizedBlockHashes"][-1]
        outputs = []
        for params in ("", "0x"):
            started = await c.ask("chainHead_v1_call", [sid, block, "Core_version", params])
            done = await _op_end(c, sid, started["result"]["operationId"])
            assert done["event"] == "operationCallDone", done
            outputs.append(done["output"])
        assert outputs[0] == outputs[1]
        bad = await c.ask("chainHead_v1_call", [sid, block, "Core_version", "0xzz"])
        assert bad["error"]["code"] == -32602
        message = bad["error"]["message"]  # its prefix once, no code inside
        assert message.count("invalid params") == 1 and "-32602" not in message, message


async def _at_least(blocks: Any, n: int) -> set[str] | None:
    got = await blocks
    return got if len(got) >= n else None


async def test_a_stopped_operation_says_nothing_more_and_frees_its_slots(stack: Stack) -> None:
    async with client(stack) as c:
        sid = await follow(c)
        block = events(c, sid)[0]["finalizedBlockHashes"][-1]
        items = [{"key": NUMBER_KEY + f"{i:02x}", "type": "value"} for i in range(4)]
        started = (await c.ask("chainHead_v1_storage", [sid, block, items, None]))["result"]
        op = started["operationId"]
        await wait_until(
            lambda: any(
                e["event"] == "operationWaitingForContinue" and e["operationId"] == op
                for e in events(c, sid)
            ),
            15,
            "the storage read waits for a continue",
        )
        assert (await c.ask("chainHead_v1_stopOperation", [sid, op]))["result"] is None
        body = (await c.ask("chainHead_v1_body", [sid, block]))["result"]
        assert body["result"] == "started"  # its four slots are free
        await _op_end(c, sid, body["operationId"])
        of_op = [e for e in events(c, sid) if e.get("operationId") == op]
        assert of_op[-1]["event"] == "operationWaitingForContinue"  # nothing after the stop
        late = await c.ask("chainHead_v1_continue", [sid, op])
        assert late["result"] is None  # a stopped operation: no effect


def _finalized_number(node: Node) -> int:
    head = node.rpc("chain_getFinalizedHead")["result"]
    return int(node.rpc("chain_getHeader", [head])["result"]["number"], 16)


async def test_archive_finalized_height_is_the_least_the_nodes_hold(stack: Stack) -> None:
    """``archive_v1_finalizedHeight``: what the spec advises a load balancer,
    the least finalized height of the (synced) nodes calls go to, so every
    block at or below it is finalized on each of them and no one node's death
    takes an answer back. (Before: the height of the node asked, the highest
    seen.) Never lower than an earlier answer: with one locked in before the
    sidecar saw the node behind, the answer waits for it."""
    behind = stack.nodes[1]
    behind.control(finality_lag=8)  # as synced as the others, finalizing later
    try:

        def seen_behind() -> bool:
            ups = sidecar_routes(stack)["upstreams"]
            fins = {u["url"]: u["finalized"] or 0 for u in ups}
            assert behind.url in fins, fins  # the sidecar names it by its URL
            return fins[behind.url] < max(fins.values()) - 4

        await wait_until(seen_behind, 20, "the sidecar sees the node finalizing later")

        async def height() -> int:
            r = await post(stack.rpc_url(), call("archive_v1_finalizedHeight"))
            got = r.body["result"]
            assert isinstance(got, int), r.body
            return got

        async def held() -> bool:
            return await height() <= _finalized_number(behind)

        await wait_until(held, 30, "an answer the node behind has finalized")
        for _ in range(4):
            assert await height() <= _finalized_number(behind)
            await asyncio.sleep(0.5)
    finally:
        behind.control(finality_lag=2)


def _best_ahead_of_finality(evs: list[dict[str, Any]], start: int) -> bool:
    """After event ``start``: a best block the next finalized event leaves
    unfinalized (the best runs ahead of finality, as a node's does; a view fed
    by a node on another fork only had its best set to each finalized block)."""
    for i in range(start, len(evs)):
        if evs[i]["event"] != "bestBlockChanged":
            continue
        best = evs[i]["bestBlockHash"]
        fin = next((e for e in evs[i + 1 :] if e["event"] == "finalized"), None)
        if fin is not None and best not in fin["finalizedBlockHashes"]:
            return True
    return False


async def test_a_follow_leaves_a_node_whose_best_heads_are_on_another_fork(stack: Stack) -> None:
    """A node under the view follows a minority fork (its finality stalled,
    as a minority's does). Fed by it, the finalized heads go silent and the
    watchdog moves them; the best heads keep coming, but fall below finality
    once the network's finality passes the fork point, and the follow's best
    would stay at each finalized block for as long as the node lies. The view
    moves that subscription after two such heads (``test_view.py`` holds the
    rule): the best runs ahead of finality again, with no ``stop`` and every
    block in order."""
    async with client(stack) as c:
        sid, holders = await _followed(stack, c)
        # one node of three lies (a minority): the one under both subscriptions,
        # or one of the two, whichever subscription it holds
        liars = holders[:1]
        try:
            for n in liars:
                n.control(fork=True, finality_lag=1000)
            await asyncio.sleep(8 * BLOCK_S)  # finality passes the fork point meanwhile
            mark = len(events(c, sid))
            await wait_until(
                lambda: _best_ahead_of_finality(events(c, sid), mark),
                20,
                "a best block ahead of finality again",
            )
        finally:
            for n in liars:
                n.reset()
        check_order(events(c, sid))
